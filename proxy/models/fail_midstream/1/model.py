"""Decoupled model that fails part-way through a stream.

It sends min(MAX_TOKENS, 2) text responses and then a response carrying a backend error
together with the final flag, so clients see data first and the failure afterwards.
"""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

DEFAULT_DELAY_MS = 5
RESPONSES_BEFORE_FAILURE = 2


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
        message = f"fail_midstream: backend failure after {RESPONSES_BEFORE_FAILURE} responses"
        try:
            prompt = _scalar(request, "PROMPT").decode("utf-8")
            max_tokens = int(_scalar(request, "MAX_TOKENS"))
            delay_s = int(_scalar(request, "DELAY_MS", DEFAULT_DELAY_MS)) / 1000.0
            for i in range(min(max_tokens, RESPONSES_BEFORE_FAILURE)):
                if i:
                    time.sleep(delay_s)
                text = np.array([f"{prompt}-{i}".encode()], dtype=np.object_)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
            time.sleep(delay_s)
        except Exception as exc:
            # Bad inputs end the stream through the same error-and-final path.
            message = f"fail_midstream: {exc}"
        try:
            # Error and final flag in one send: the stream ends with the failure itself.
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
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
