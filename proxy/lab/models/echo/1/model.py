"""Plain (non-decoupled) echo: OUTPUT is INPUT, optionally after sleeping DELAY_MS.

It exists for unary traffic and for large tensors (20 MB+) through the proxy.
"""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            if delay is not None:
                # Non-decoupled requests cannot be polled for cancellation here; just wait.
                time.sleep(int(delay.as_numpy().reshape(-1)[0]) / 1000.0)
            data = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", data)]))
        return responses
