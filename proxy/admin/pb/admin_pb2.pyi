from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OpenCall(_message.Message):
    __slots__ = ("call", "method", "model", "age_ms", "in_flight", "executing", "responded", "in_flight_models")
    CALL_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    EXECUTING_FIELD_NUMBER: _ClassVar[int]
    RESPONDED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_MODELS_FIELD_NUMBER: _ClassVar[int]
    call: str
    method: str
    model: str
    age_ms: float
    in_flight: _containers.RepeatedScalarFieldContainer[str]
    executing: _containers.RepeatedScalarFieldContainer[str]
    responded: _containers.RepeatedScalarFieldContainer[str]
    in_flight_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, call: _Optional[str] = ..., method: _Optional[str] = ..., model: _Optional[str] = ..., age_ms: _Optional[float] = ..., in_flight: _Optional[_Iterable[str]] = ..., executing: _Optional[_Iterable[str]] = ..., responded: _Optional[_Iterable[str]] = ..., in_flight_models: _Optional[_Iterable[str]] = ...) -> None: ...

class Counters(_message.Message):
    __slots__ = ("records", "calls_by_cause", "dropped", "messages", "message_bytes")
    class RecordsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class CallsByCauseEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class MessagesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class MessageBytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    CALLS_BY_CAUSE_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    records: _containers.ScalarMap[str, int]
    calls_by_cause: _containers.ScalarMap[str, int]
    dropped: int
    messages: _containers.ScalarMap[str, int]
    message_bytes: _containers.ScalarMap[str, int]
    def __init__(self, records: _Optional[_Mapping[str, int]] = ..., calls_by_cause: _Optional[_Mapping[str, int]] = ..., dropped: _Optional[int] = ..., messages: _Optional[_Mapping[str, int]] = ..., message_bytes: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TailStats(_message.Message):
    __slots__ = ("subscribers", "records_sent", "records_dropped")
    SUBSCRIBERS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_SENT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    subscribers: int
    records_sent: int
    records_dropped: int
    def __init__(self, subscribers: _Optional[int] = ..., records_sent: _Optional[int] = ..., records_dropped: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "uptime_s", "listen", "upstream", "tls_listen", "tls_upstream", "open_calls", "counters", "capture_files", "writer_queue", "tail", "recent_first_seq", "next_seq", "http_listen", "http_upstream")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    LISTEN_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    TLS_LISTEN_FIELD_NUMBER: _ClassVar[int]
    TLS_UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    OPEN_CALLS_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_FILES_FIELD_NUMBER: _ClassVar[int]
    WRITER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    RECENT_FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    HTTP_LISTEN_FIELD_NUMBER: _ClassVar[int]
    HTTP_UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    version: str
    uptime_s: float
    listen: str
    upstream: str
    tls_listen: bool
    tls_upstream: bool
    open_calls: _containers.RepeatedCompositeFieldContainer[OpenCall]
    counters: Counters
    capture_files: _containers.RepeatedScalarFieldContainer[str]
    writer_queue: int
    tail: TailStats
    recent_first_seq: int
    next_seq: int
    http_listen: str
    http_upstream: str
    def __init__(self, version: _Optional[str] = ..., uptime_s: _Optional[float] = ..., listen: _Optional[str] = ..., upstream: _Optional[str] = ..., tls_listen: _Optional[bool] = ..., tls_upstream: _Optional[bool] = ..., open_calls: _Optional[_Iterable[_Union[OpenCall, _Mapping]]] = ..., counters: _Optional[_Union[Counters, _Mapping]] = ..., capture_files: _Optional[_Iterable[str]] = ..., writer_queue: _Optional[int] = ..., tail: _Optional[_Union[TailStats, _Mapping]] = ..., recent_first_seq: _Optional[int] = ..., next_seq: _Optional[int] = ..., http_listen: _Optional[str] = ..., http_upstream: _Optional[str] = ...) -> None: ...

class RotateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RotateResponse(_message.Message):
    __slots__ = ("closed_file", "new_file")
    CLOSED_FILE_FIELD_NUMBER: _ClassVar[int]
    NEW_FILE_FIELD_NUMBER: _ClassVar[int]
    closed_file: str
    new_file: str
    def __init__(self, closed_file: _Optional[str] = ..., new_file: _Optional[str] = ...) -> None: ...

class MarkRequest(_message.Message):
    __slots__ = ("note", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NOTE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    note: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, note: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class MarkResponse(_message.Message):
    __slots__ = ("t_ns",)
    T_NS_FIELD_NUMBER: _ClassVar[int]
    t_ns: int
    def __init__(self, t_ns: _Optional[int] = ...) -> None: ...

class TailFilter(_message.Message):
    __slots__ = ("models", "methods", "request_ids", "kinds")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedScalarFieldContainer[str]
    methods: _containers.RepeatedScalarFieldContainer[str]
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    kinds: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, models: _Optional[_Iterable[str]] = ..., methods: _Optional[_Iterable[str]] = ..., request_ids: _Optional[_Iterable[str]] = ..., kinds: _Optional[_Iterable[str]] = ...) -> None: ...

class TailRequest(_message.Message):
    __slots__ = ("filter", "from_seq", "max_queue")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_FIELD_NUMBER: _ClassVar[int]
    filter: TailFilter
    from_seq: int
    max_queue: int
    def __init__(self, filter: _Optional[_Union[TailFilter, _Mapping]] = ..., from_seq: _Optional[int] = ..., max_queue: _Optional[int] = ...) -> None: ...

class TailRecord(_message.Message):
    __slots__ = ("seq", "kind", "json")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    seq: int
    kind: str
    json: bytes
    def __init__(self, seq: _Optional[int] = ..., kind: _Optional[str] = ..., json: _Optional[bytes] = ...) -> None: ...

class TailDropped(_message.Message):
    __slots__ = ("count", "first_seq", "last_seq")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    count: int
    first_seq: int
    last_seq: int
    def __init__(self, count: _Optional[int] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ...) -> None: ...

class TailStarted(_message.Message):
    __slots__ = ("first_seq", "from_seq_lost")
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_LOST_FIELD_NUMBER: _ClassVar[int]
    first_seq: int
    from_seq_lost: bool
    def __init__(self, first_seq: _Optional[int] = ..., from_seq_lost: _Optional[bool] = ...) -> None: ...

class TailResponse(_message.Message):
    __slots__ = ("started", "record", "dropped")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    started: TailStarted
    record: TailRecord
    dropped: TailDropped
    def __init__(self, started: _Optional[_Union[TailStarted, _Mapping]] = ..., record: _Optional[_Union[TailRecord, _Mapping]] = ..., dropped: _Optional[_Union[TailDropped, _Mapping]] = ...) -> None: ...
