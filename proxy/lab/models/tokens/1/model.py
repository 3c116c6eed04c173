"""Decoupled token stream answered from one thread per request (the `tokens` family).

Each request is answered from its own thread so that two requests on one gRPC stream
interleave even though the model has a single instance. The config parameters choose the
family member (`tokens`, `tokens_ignore_cancel`, `silent`, `fail_midstream` share this file):

- ``honour_cancel`` ("true" default): check ``is_cancelled()`` before every response and stop
  at once; "false" keeps computing after the client left (Triton drops the responses);
- ``text`` ("true" default): "false" sends no data at all, only the final flag after DELAY_MS;
- ``fail_after`` (unset default): after that many text responses, one response carrying a
  backend error together with the final flag, so clients see data first and the failure after;
- ``script`` ("false" default): "true" (the `scripted` model) answers with the comma-separated
  steps of PROMPT, DELAY_MS apart: ``t`` a text, ``e`` an error response without the final flag,
  ``E`` an error response with it, ``F`` the final flag alone; a script that ends without ``E``
  or ``F`` sends nothing more (what Triton then does is what the e2e tests pin).
- ``max_tokens_cap`` (unset default): never more than that many text responses, whatever
  MAX_TOKENS asks (the same model answering differently, for ``replay send`` regression tests).
"""

import json
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
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        self._name = config["name"]
        self._honour = params.get("honour_cancel", "true") == "true"
        self._text = params.get("text", "true") == "true"
        self._fail_after = int(params["fail_after"]) if params.get("fail_after") else None
        self._script = params.get("script", "false") == "true"
        self._cap = int(params["max_tokens_cap"]) if params.get("max_tokens_cap") else None
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
        if self._script:
            try:
                self._play(request, sender)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())
            return
        try:
            error = self._stream(request, sender)
        except Exception as exc:
            # Bad inputs end the stream through the same error-and-final path.
            error = f"{self._name}: {exc}"
        try:
            if error is None:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                # Error and final flag in one send: without a final the client's stream would wait forever.
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(error)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _play(self, request, sender):
        """Send the steps of the PROMPT script (see the module docstring)."""
        delay_s = int(_scalar(request, "DELAY_MS", DEFAULT_DELAY_MS)) / 1000.0
        steps = [s for s in _scalar(request, "PROMPT").decode("utf-8").split(",") if s]
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for i, step in enumerate(steps):
            if i:
                time.sleep(delay_s)
            if step == "t":
                text = np.array([f"t-{i}".encode()], dtype=np.object_)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
            elif step in ("e", "E"):
                error = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{self._name}: error {i}"))
                sender.send(error, flags=final if step == "E" else 0)
            elif step == "F":
                sender.send(flags=final)

    def _stream(self, request, sender):
        """Send the text responses; the error text to end with, or None."""
        delay_s = int(_scalar(request, "DELAY_MS", DEFAULT_DELAY_MS)) / 1000.0
        if not self._text:
            time.sleep(delay_s)
            return None
        request_id = request.request_id()
        prompt = _scalar(request, "PROMPT").decode("utf-8")
        max_tokens = int(_scalar(request, "MAX_TOKENS"))
        if self._fail_after is not None:
            max_tokens = min(max_tokens, self._fail_after)
        if self._cap is not None:
            max_tokens = min(max_tokens, self._cap)
        sent = 0
        for i in range(max_tokens):
            if i:
                time.sleep(delay_s)
            # Checked after the sleep so a cancel that lands mid-delay costs no response.
            if self._honour and request.is_cancelled():
                pb_utils.Logger.log_info(f"{self._name}: request {request_id} cancelled after {sent} responses")
                return None
            text = np.array([f"{prompt}-{i}".encode()], dtype=np.object_)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
            sent += 1
        if self._fail_after is not None:
            time.sleep(delay_s)
            return f"{self._name}: backend failure after {self._fail_after} responses"
        pb_utils.Logger.log_info(f"{self._name}: request {request_id} done {sent}")
        return None

    def finalize(self):
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()
