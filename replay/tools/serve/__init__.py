"""``triton-tap serve``: a mock Triton that answers real clients from captures.

A grpc.aio server implementing ``inference.GRPCInferenceService`` (tritonclient's ``service_pb2_grpc``
servicer) whose answers come from a :class:`~replay.tools.serve.index.LoadedCapture` (:func:`load`: one
streaming pass; a compact index in memory, the answers in a temporary file, read back when asked:
:mod:`~replay.tools.serve.index`, pure); :mod:`~replay.tools.serve.responses` builds the answers from
captured records and :mod:`~replay.tools.serve.pick` chooses the captured call answering a non-inference
RPC (both pure); :mod:`~replay.tools.serve.session` is what every served call shares (matcher, timing,
refusals), :mod:`~replay.tools.serve.stream` replays one ModelStreamInfer call,
:mod:`~replay.tools.serve.server` is the grpc.aio shell. Which captured request an incoming one stands for is :mod:`replay.tools.match`'s
decision.

* ``ModelStreamInfer``: each incoming request is matched; its captured responses are sent with the
  captured delays after the request's arrival (relative timing), scaled, or at once (``fast``:
  in captured order among the requests that have arrived). Each response carries the incoming
  request's id (``keep_ids`` keeps the captured ones). The stream follows the captured call of its
  first matched request: a captured non-OK end (a client cancel, a deadline, a dropped upstream,
  an error status) is reproduced with its status and details once every request and response
  captured before it has been replayed, at the captured point in time; an OK end closes the stream
  with the captured trailers after the client half-closed and every response was sent.
* ``ModelInfer``: the captured response (``--payload full``: the real bytes; ``meta``: names, shapes
  and datatypes with zero-filled data, and a logged warning) or the captured error status.
* Other RPCs (readiness, metadata, config...): the captured answer of a call of the same method,
  preferring one whose request was the same. ``meta`` captures hold no bytes of those answers;
  only the readiness booleans can be told from the message size (protobuf writes ``false`` as
  nothing), the others answer ``FAILED_PRECONDITION`` explaining why.
* A request naming a shared-memory region (its tensors' data in the client's memory, never on the wire): the
  captured answer, no region written, and a log line per call saying so
  (:meth:`~replay.tools.serve.session.Session.note_shared_memory`).
* A request that matches nothing: ``NOT_FOUND`` naming the closest captured request and why it did
  not match, and a log line.

Triton's HTTP port (``--http-listen``) is :mod:`replay.tools.serve.httpd`'s: an asyncio HTTP/1.1 server with
h11 as its parser, answering through the same :class:`~replay.tools.serve.session.Session` (see its docstring).
"""

from replay.tools.serve.index import LoadedCapture, load
from replay.tools.serve.responses import parse_timing
from replay.tools.serve.server import MockTriton

__all__ = ["LoadedCapture", "MockTriton", "load", "parse_timing"]
