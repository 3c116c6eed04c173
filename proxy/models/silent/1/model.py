"""Decoupled model whose stream carries no data: after DELAY_MS it sends only the final flag.

It pins how an empty stream looks to clients (and to a recording proxy): with
enable_empty_final_response the client gets exactly one empty, final response.
"""

import threading
import time

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
        try:
            time.sleep(int(_scalar(request, "DELAY_MS", DEFAULT_DELAY_MS)) / 1000.0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:
            # Without a final response the client's stream would wait forever.
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(f"silent: {exc}")),
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
