/* The frame reader's and the message assembler's common cases, compiled.
 *
 * cut(buf, view, i, max_frame, out[, decoded]) -> the index it stopped at.
 *
 * Why: proxy.wire.frames.FrameReader.feed runs once per read and its loop once per frame; as Python
 * that loop and its per-frame check were ~17 % of the proxy's work per streamed response (py-spy,
 * issue 18). This cuts the frames the loop would pass on as they are, from `buf[i:]`, appending to
 * `out` the tuple the Python loop appends, `(type, flags, stream id, payload, raw frame)` with
 * `payload` and `raw` slices of `view` (a memoryview of `buf`).
 *
 * It only takes frames whose handling is plain: DATA without padding on a stream, WINDOW_UPDATE,
 * RST_STREAM, PING, SETTINGS, PRIORITY, GOAWAY and frame types HTTP/2 does not define, each of a size
 * and on a stream the framing rules allow. It stops, returning the frame's index, at anything else:
 * a frame not complete in `buf`, one over `max_frame`, HEADERS, CONTINUATION, PUSH_PROMISE, padded
 * DATA, any frame breaking a rule. FrameReader.feed then handles that frame the Python way (and raises
 * for a bad one) and calls this again. So the rules live in one place, the Python, and
 * tests/proxy/wire/test_cut.py holds the two readers equal on random frame sequences.
 *
 * With `decoded` (FrameReader._decoded), a HEADERS frame holding a whole block (END_HEADERS, on a
 * stream, neither padded nor with priority fields) is taken too: what it appends is what
 * `decoded(stream id, END_STREAM flag, block bytes, raw frame)` returns, as in the Python loop, and an
 * error it raises (an undecodable block) leaves this with the frames before it in `out`. A unary call
 * has three such frames: as Python they were most of the reader's work per call.
 *
 * Pure: no I/O, no state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { DATA = 0, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION };
#define END_STREAM 0x1
#define END_HEADERS 0x4
#define PADDED 0x8
#define PRIORITY_FLAG 0x20

/* Whether frame (type, sid, length) is one this takes (see above): the Python _check would pass it,
 * and feed would append it as it is. */
static int plain(int ftype, unsigned long sid, unsigned long length, int flags) {
    switch (ftype) {
    case DATA:
        return sid != 0 && !(flags & PADDED);
    case WINDOW_UPDATE:
        return length == 4;
    case RST_STREAM:
        return sid != 0 && length == 4;
    case PING:
        return sid == 0 && length == 8;
    case SETTINGS:
        return sid == 0 && length % 6 == 0;
    case PRIORITY:
        return sid != 0 && length == 5;
    case GOAWAY:
        return sid == 0 && length >= 8;
    case HEADERS:
    case PUSH_PROMISE:
    case CONTINUATION:
        return 0;
    default:
        return ftype > CONTINUATION; /* undefined types: passed on, whatever their stream */
    }
}

/* The tuple the Python loop appends for a plain frame: (type, flags, stream id, payload, raw frame). */
static PyObject *plain_frame(PyObject *view, Py_ssize_t i, Py_ssize_t end, int ftype, int flags, unsigned long sid) {
    PyObject *raw = PySequence_GetSlice(view, i, end);
    PyObject *payload = raw != NULL ? PySequence_GetSlice(view, i + 9, end) : NULL;
    PyObject *t = NULL;
    if (payload != NULL) {
        t = PyTuple_New(5);
        if (t != NULL) {
            PyObject *a = PyLong_FromLong(ftype), *b = PyLong_FromLong(flags), *c = PyLong_FromUnsignedLong(sid);
            if (a == NULL || b == NULL || c == NULL) {
                Py_XDECREF(a);
                Py_XDECREF(b);
                Py_XDECREF(c);
                Py_CLEAR(t);
            } else {
                PyTuple_SET_ITEM(t, 0, a);
                PyTuple_SET_ITEM(t, 1, b);
                PyTuple_SET_ITEM(t, 2, c);
                PyTuple_SET_ITEM(t, 3, Py_NewRef(payload));
                PyTuple_SET_ITEM(t, 4, Py_NewRef(raw));
            }
        }
    }
    Py_XDECREF(raw);
    Py_XDECREF(payload);
    return t;
}

/* What the Python loop appends for a whole header block: decoded(stream id, END_STREAM, block, raw frame). */
static PyObject *header_block(PyObject *decoded, PyObject *view, const unsigned char *h, Py_ssize_t i, Py_ssize_t end,
                              unsigned long sid, int flags) {
    PyObject *raw = PySequence_GetSlice(view, i, end);
    PyObject *block = raw != NULL ? PyBytes_FromStringAndSize((const char *)h + 9, end - i - 9) : NULL;
    PyObject *t = NULL;
    if (block != NULL) {
        PyObject *a = PyLong_FromUnsignedLong(sid), *b = PyLong_FromLong(flags & END_STREAM);
        if (a != NULL && b != NULL)
            t = PyObject_CallFunctionObjArgs(decoded, a, b, block, raw, NULL);
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
    Py_XDECREF(raw);
    Py_XDECREF(block);
    return t;
}

static PyObject *cut(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 5 || nargs > 6 || !PyBytes_CheckExact(args[0]) || !PyMemoryView_Check(args[1]) || !PyList_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "cut(buf: bytes, view: memoryview, i: int, max_frame: int, out: list[, decoded])");
        return NULL;
    }
    PyObject *view = args[1], *out = args[4];
    PyObject *decoded = nargs == 6 && args[5] != Py_None ? args[5] : NULL;
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t i = PyLong_AsSsize_t(args[2]);
    long long max_frame = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (i < 0 || PyMemoryView_GET_BUFFER(view)->len != n) {
        PyErr_SetString(PyExc_ValueError, "cut: view must be all of buf, i within it");
        return NULL;
    }
    /* Hot loop: once per frame of every read. */
    while (n - i >= 9) {
        const unsigned char *h = s + i;
        unsigned long length = (unsigned long)h[0] << 16 | (unsigned long)h[1] << 8 | h[2];
        if ((long long)length > max_frame)
            break;
        Py_ssize_t end = i + 9 + (Py_ssize_t)length;
        if (end > n)
            break;
        int ftype = h[3], flags = h[4];
        unsigned long sid = ((unsigned long)h[5] << 24 | (unsigned long)h[6] << 16 | (unsigned long)h[7] << 8 | h[8]) & 0x7FFFFFFFUL;
        PyObject *t;
        if (ftype == HEADERS && decoded != NULL && sid != 0 && (flags & (END_HEADERS | PADDED | PRIORITY_FLAG)) == END_HEADERS)
            t = header_block(decoded, view, h, i, end, sid, flags);
        else if (plain(ftype, sid, length, flags))
            t = plain_frame(view, i, end, ftype, flags, sid);
        else
            break;
        if (t == NULL)
            return NULL;
        int r = PyList_Append(out, t);
        Py_DECREF(t);
        if (r < 0)
            return NULL;
        i = end;
    }
    return PyLong_FromSsize_t(i);
}

/* messages(data, i, keep, out) -> the index it stopped at: the whole gRPC messages of data[i:] (5-byte
 * prefix, then the body), each appended as the Assembler's fast path appends it (without hashing),
 * `(flag, length, body bytes, False, None)`. It stops at a message not whole in `data` or longer than
 * `keep`: proxy.wire.messages.Assembler.feed goes on from there the Python way. Hot loop: once per
 * message of every DATA frame. */
static PyObject *messages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4 || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "messages(data, i: int, keep: int, out: list)");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    long long keep = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *s = view.buf;
    Py_ssize_t n = view.len;
    PyObject *res = NULL;
    if (i < 0) {
        PyErr_SetString(PyExc_ValueError, "messages: i < 0");
        goto done;
    }
    while (n - i >= 5) {
        const unsigned char *h = s + i;
        unsigned long long length = (unsigned long long)h[1] << 24 | (unsigned long long)h[2] << 16 | (unsigned long long)h[3] << 8 | h[4];
        if ((long long)length > keep || length > (unsigned long long)(n - i - 5))
            break;
        PyObject *t = PyTuple_New(5);
        PyObject *flag = PyLong_FromLong(h[0]), *len = PyLong_FromUnsignedLongLong(length);
        PyObject *body = PyBytes_FromStringAndSize((const char *)h + 5, (Py_ssize_t)length);
        if (t == NULL || flag == NULL || len == NULL || body == NULL) {
            Py_XDECREF(t);
            Py_XDECREF(flag);
            Py_XDECREF(len);
            Py_XDECREF(body);
            goto done;
        }
        PyTuple_SET_ITEM(t, 0, flag);
        PyTuple_SET_ITEM(t, 1, len);
        PyTuple_SET_ITEM(t, 2, body);
        PyTuple_SET_ITEM(t, 3, Py_NewRef(Py_False));
        PyTuple_SET_ITEM(t, 4, Py_NewRef(Py_None));
        int r = PyList_Append(args[3], t);
        Py_DECREF(t);
        if (r < 0)
            goto done;
        i += 5 + (Py_ssize_t)length;
    }
    res = PyLong_FromSsize_t(i);
done:
    PyBuffer_Release(&view);
    return res;
}

static PyMethodDef methods[] = {
    {"messages", (PyCFunction)(void (*)(void))messages, METH_FASTCALL,
     "messages(data, i, keep, out) -> int: the whole messages of data[i:] appended to out (proxy/wire/messages.py)"},
    {"cut", (PyCFunction)(void (*)(void))cut, METH_FASTCALL,
     "cut(buf, view, i, max_frame, out[, decoded]) -> int: the plain frames of buf[i:] appended to out (proxy/wire/frames.py)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cut", "The frame reader's and the assembler's common cases, compiled (proxy/wire/frames.py, messages.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__cut(void) { return PyModule_Create(&module); }
