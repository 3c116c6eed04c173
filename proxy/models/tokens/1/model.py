"""Decoupled token stream that honours cancellation.

Each request is answered from its own thread so that two requests on one gRPC stream
interleave even though the model has a single instance.
"""

import threading
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
        self._threads = set()
        self._lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self._answer, args=(request,), daemon=True)
            with self._lock:
                self._threads.add(thread)
            thread.start()
        # Returning at once frees the instance for the next request on the stream.
        return None

    def _answer(self, request):
        sender = request.get_response_sender()
        request_id = request.request_id()
        sent = 0
        try:
            prompt = _scalar(request, "PROMPT").decode("utf-8")
            max_tokens = int(_scalar(request, "MAX_TOKENS"))
            delay_s = int(_scalar(request, "DELAY_MS", DEFAULT_DELAY_MS)) / 1000.0
            for i in range(max_tokens):
                if i:
                    time.sleep(delay_s)
                # Checked after the sleep so a cancel that lands mid-delay costs no response.
                if request.is_cancelled():
                    pb_utils.Logger.log_info(f"tokens: request {request_id} cancelled after {sent} responses")
                    break
                text = np.array([f"{prompt}-{i}".encode()], dtype=np.object_)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
                sent += 1
            else:
                pb_utils.Logger.log_info(f"tokens: request {request_id} done {sent}")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:
            # Without a final response the client's stream would wait forever.
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tokens: {exc}")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def finalize(self):
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()
