"""Step-by-step token generator that occupies its (single) model instance while it works.

Unlike `tokens`, which answers from a thread and frees the instance at once, this model does
all its work inside ``execute``: a second request waits in Triton's queue until the first one
is finished (or has stopped), which is what makes queued cancels and queue-service probes
observable. Whether it checks ``request.is_cancelled()`` between steps is the config parameter
``honour_cancel``; decoupled configs stream one response per step, the unary config answers once.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

DEFAULT_DELAY_MS = 5


def _scalar(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self._name = config["name"]
        params = config.get("parameters", {})
        self._honour = params.get("honour_cancel", {}).get("string_value", "true") == "true"
        self._decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    def execute(self, requests):
        responses = []
        for request in requests:
            responses.append(self._run(request))
        return None if self._decoupled else responses

    def _run(self, request):
        sender = request.get_response_sender() if self._decoupled else None
        request_id = request.request_id()
        done = 0
        try:
            prompt = _scalar(request, "PROMPT").decode("utf-8")
            steps = int(_scalar(request, "MAX_TOKENS"))
            delay_s = int(_scalar(request, "DELAY_MS", DEFAULT_DELAY_MS)) / 1000.0
            pb_utils.Logger.log_info(f"{self._name}: request {request_id} started")
            for i in range(steps):
                if i:
                    time.sleep(delay_s)
                if self._honour and request.is_cancelled():
                    pb_utils.Logger.log_info(f"{self._name}: request {request_id} cancelled after {done} steps")
                    if sender is not None:
                        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                        return None
                    return pb_utils.InferenceResponse(error=pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED))
                done += 1
                if sender is not None:
                    text = np.array([f"{prompt}-{i}".encode()], dtype=np.object_)
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
            pb_utils.Logger.log_info(f"{self._name}: request {request_id} done {done}")
            if sender is not None:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
            text = np.array([f"{prompt}-{done}".encode()], dtype=np.object_)
            return pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)])
        except Exception as exc:
            error = pb_utils.TritonError(f"{self._name}: {exc}")
            if sender is not None:
                # Without a final response the client's stream would wait forever.
                sender.send(pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
            return pb_utils.InferenceResponse(error=error)
