/* The labels' field scanner, compiled: label_key(buf, strip, nested, ident, nested_ident, ids).
 *
 * Why: every streamed response's labels come from the labels cache, keyed by this scan of the
 * message's fields; as Python (proxy.triton.labels.py_label_key) it was the largest single piece of
 * the relay's per-message work (~5 us of ~30 per streamed response, `python -m bench.micro`; issue 18).
 * `lookup` (below) is what the relay calls: the scan, the cache lookup, the copy and the request id in
 * one call. `label_key` exposes the same scan alone, so tests/proxy/triton/test_scan.py can hold it
 * equal to py_label_key with Hypothesis, on random bytes too; py_label_key and labels._cached stay the
 * path without the compiled module or with TRITON_TAP_PURE=1.
 *
 * The rules (see label_key's docstring in labels.py): one pass over the top-level fields; the
 * contents of a `strip`-tagged field (wire type 2) are left out, its tag byte kept; the contents of
 * an `ident`-tagged field are left out and appended to `ids`; a `nested`-tagged field's contents are
 * keyed the same way (with `nested_ident` as their ident) and kept as tag, 4-byte big-endian length,
 * key. None for anything not understood: a group or invalid wire type, a field running past the end,
 * an over-long length varint, an over-long tag varint equal to one of the three tags.
 *
 * Pure: no I/O, no state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* A growing byte buffer for the key (most keys are < 256 bytes: no allocation). */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char small[512];
} Buf;

static void buf_init(Buf *b) {
    b->p = b->small;
    b->len = 0;
    b->cap = sizeof(b->small);
}

static void buf_free(Buf *b) {
    if (b->p != b->small)
        PyMem_Free(b->p);
}

static int buf_put(Buf *b, const char *src, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = (b->len + n) * 2;
        char *p = PyMem_Malloc((size_t)cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(p, b->p, (size_t)b->len);
        buf_free(b);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

/* Whether the varint tag at s[0..k) (k >= 2 bytes, the last one without its high bit) equals `want`
 * (below 128), without overflowing: Python compares arbitrary-precision ints. */
static int tag_equals(const unsigned char *s, Py_ssize_t k, unsigned long long want) {
    for (Py_ssize_t j = 0; j < k; j++) {
        unsigned long long group = s[j] & 0x7F;
        unsigned long long expect = j * 7 < 64 ? (want >> (j * 7)) & 0x7F : 0;
        if (group != expect)
            return 0;
    }
    return 1;
}

/* Returns 1 with the key in `out` (`same` set when the key is `buf` itself: nothing left out),
 * 0 for None, -1 with an exception set. */
static int scan(const unsigned char *s, Py_ssize_t n, unsigned long long strip, unsigned long long nested,
                unsigned long long ident, unsigned long long nested_ident, PyObject *ids, Buf *out, int *same, int top) {
    Py_ssize_t i = 0, last = 0;
    int parts = 0;
    while (i < n) {
        Py_ssize_t start = i;
        unsigned long long tag = s[i++];
        if (tag & 0x80) {
            /* a tag of several bytes: its low 3 bits are the wire type; equal to one of ours only
             * in an over-long encoding, which protobuf normalises: let protobuf judge it */
            while (1) {
                if (i >= n)
                    return 0;
                if (!(s[i++] & 0x80))
                    break;
            }
            Py_ssize_t k = i - start;
            if (tag_equals(s + start, k, strip) || tag_equals(s + start, k, nested) || tag_equals(s + start, k, ident))
                return 0;
            tag = 0x100 | (tag & 7); /* any value > 0xFF with the same wire type: equal to none of ours */
        }
        int wire = (int)(tag & 7);
        if (wire == 2) {
            if (i >= n)
                return 0;
            unsigned long long length = s[i++];
            if (length & 0x80) {
                Py_ssize_t at = --i; /* read again from its first byte */
                length = 0;
                int shift = 0;
                while (1) {
                    if (i >= n)
                        return 0;
                    unsigned char b = s[i++];
                    if (i - at <= 5)
                        length |= (unsigned long long)(b & 0x7F) << shift;
                    shift += 7;
                    if (!(b & 0x80))
                        break;
                }
                if (i - at > 5 || !s[i - 1])
                    return 0; /* over-long length varints: let protobuf judge them */
            }
            if (length > (unsigned long long)(n - i))
                return 0;
            Py_ssize_t end = i + (Py_ssize_t)length;
            if (tag == strip) {
                unsigned char t = (unsigned char)tag;
                if (buf_put(out, (const char *)s + last, start - last) < 0 || buf_put(out, (const char *)&t, 1) < 0)
                    return -1;
                last = end;
                parts = 1;
            } else if (tag == ident && ids != NULL) {
                PyObject *id = PyBytes_FromStringAndSize((const char *)s + i, end - i);
                if (id == NULL)
                    return -1;
                int r = PyList_Append(ids, id);
                Py_DECREF(id);
                if (r < 0)
                    return -1;
                unsigned char t = (unsigned char)tag;
                if (buf_put(out, (const char *)s + last, start - last) < 0 || buf_put(out, (const char *)&t, 1) < 0)
                    return -1;
                last = end;
                parts = 1;
            } else if (tag == nested) {
                unsigned char head[5];
                if (buf_put(out, (const char *)s + last, start - last) < 0)
                    return -1;
                Py_ssize_t at = out->len;
                head[0] = (unsigned char)tag;
                if (buf_put(out, (const char *)head, 5) < 0) /* the length is filled in below */
                    return -1;
                int inner_same = 0;
                int r = scan(s + i, end - i, strip, 0, nested_ident, 0, ids, out, &inner_same, 0);
                if (r <= 0)
                    return r;
                unsigned long long inner = (unsigned long long)(out->len - at - 5);
                if (inner > 0xFFFFFFFFULL) {
                    PyErr_SetString(PyExc_OverflowError, "int too big to convert");
                    return -1;
                }
                out->p[at + 1] = (char)(inner >> 24);
                out->p[at + 2] = (char)(inner >> 16);
                out->p[at + 3] = (char)(inner >> 8);
                out->p[at + 4] = (char)inner;
                last = end;
                parts = 1;
            }
            i = end;
        } else if (wire == 0) {
            while (1) {
                if (i >= n)
                    return 0;
                if (!(s[i++] & 0x80))
                    break;
            }
        } else if (wire == 1) {
            i += 8;
        } else if (wire == 5) {
            i += 4;
        } else {
            return 0; /* groups (deprecated) and invalid wire types: protobuf judges them */
        }
        if (i > n)
            return 0;
    }
    *same = !parts;
    /* the rest after the last left-out field; the whole buffer when nothing was left out, except at
     * the top, where the key is then the caller's object itself */
    if ((parts || !top) && buf_put(out, (const char *)s + last, n - last) < 0)
        return -1;
    return 1;
}

static int tag_arg(PyObject *o, unsigned long long *v) {
    *v = PyLong_AsUnsignedLongLong(o);
    if (*v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (*v > 0x7F) {
        /* the callers' tags are one byte (fields 1-15); a multi-byte tag then equals one only when
         * over-long, which tag_equals sees */
        PyErr_SetString(PyExc_ValueError, "label_key: tags must be below 128");
        return -1;
    }
    return 0;
}

static PyObject *label_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 6) {
        PyErr_SetString(PyExc_TypeError, "label_key(buf, strip, nested=0, ident=0, nested_ident=0, ids=None)");
        return NULL;
    }
    PyObject *buf = args[0];
    if (!PyBytes_CheckExact(buf)) {
        PyErr_SetString(PyExc_TypeError, "label_key: buf must be bytes");
        return NULL;
    }
    unsigned long long tags[4] = {0, 0, 0, 0};
    for (Py_ssize_t k = 1; k < nargs && k < 5; k++)
        if (tag_arg(args[k], &tags[k - 1]) < 0)
            return NULL;
    PyObject *ids = NULL;
    if (nargs == 6 && args[5] != Py_None) {
        if (!PyList_Check(args[5])) {
            PyErr_SetString(PyExc_TypeError, "label_key: ids must be a list or None");
            return NULL;
        }
        ids = args[5];
    }
    Buf out;
    buf_init(&out);
    int same = 0;
    int r = scan((const unsigned char *)PyBytes_AS_STRING(buf), PyBytes_GET_SIZE(buf), tags[0], tags[1], tags[2],
                 tags[3], ids, &out, &same, 1);
    PyObject *res;
    if (r < 0)
        res = NULL;
    else if (r == 0)
        res = Py_NewRef(Py_None);
    else if (same)
        res = Py_NewRef(buf); /* nothing left out: the key is the message itself, as in Python */
    else
        res = PyBytes_FromStringAndSize(out.p, out.len);
    buf_free(&out);
    return res;
}

/* lookup(cache, body, strip, nested, ident, nested_ident): the labels cache in one call. A dict (a hit:
 * a copy of the cached labels with this message's request id, when it has one), the key (bytes: a
 * miss, the caller decodes and caches under it) or None (no key, or an id protobuf would refuse: the
 * caller decodes without caching). What labels.py's `_cached` does with label_key's answer. */
static PyObject *lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6 || !PyDict_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "lookup(cache: dict, body: bytes, strip, nested, ident, nested_ident)");
        return NULL;
    }
    unsigned long long tags[4];
    for (int k = 0; k < 4; k++)
        if (tag_arg(args[k + 2], &tags[k]) < 0)
            return NULL;
    PyObject *body = args[1];
    PyObject *ids = PyList_New(0);
    if (ids == NULL)
        return NULL;
    Buf out;
    buf_init(&out);
    int same = 0;
    int r = scan((const unsigned char *)PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body), tags[0], tags[1], tags[2],
                 tags[3], ids, &out, &same, 1);
    PyObject *key = NULL, *res = NULL;
    if (r < 0)
        goto done;
    if (r == 0) {
        res = Py_NewRef(Py_None);
        goto done;
    }
    key = same ? Py_NewRef(body) : PyBytes_FromStringAndSize(out.p, out.len);
    if (key == NULL)
        goto done;
    PyObject *hit = PyDict_GetItemWithError(args[0], key);
    if (hit == NULL) {
        if (!PyErr_Occurred())
            res = Py_NewRef(key);
        goto done;
    }
    if (!PyDict_Check(hit)) {
        PyErr_SetString(PyExc_TypeError, "lookup: the cache holds a non-dict");
        goto done;
    }
    PyObject *copy = PyDict_Copy(hit);
    if (copy == NULL)
        goto done;
    Py_ssize_t nids = PyList_GET_SIZE(ids);
    if (nids) {
        /* protobuf checks every occurrence; the last one is the field's value */
        PyObject *rid = NULL;
        for (Py_ssize_t k = 0; k < nids; k++) {
            PyObject *raw = PyList_GET_ITEM(ids, k);
            Py_XDECREF(rid);
            rid = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), "strict");
            if (rid == NULL)
                break;
        }
        if (rid == NULL) {
            Py_DECREF(copy);
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto done;
            PyErr_Clear();
            res = Py_NewRef(Py_None); /* protobuf refuses it: its error, as without the cache */
            goto done;
        }
        int e = PyDict_SetItemString(copy, "request_id", rid);
        Py_DECREF(rid);
        if (e < 0) {
            Py_DECREF(copy);
            goto done;
        }
    }
    res = copy;
done:
    Py_XDECREF(key);
    Py_DECREF(ids);
    buf_free(&out);
    return res;
}

static PyMethodDef methods[] = {
    {"lookup", (PyCFunction)(void (*)(void))lookup, METH_FASTCALL,
     "lookup(cache, body, strip, nested, ident, nested_ident) -> dict | bytes | None (labels.py)"},
    {"label_key", (PyCFunction)(void (*)(void))label_key, METH_FASTCALL,
     "label_key(buf, strip, nested=0, ident=0, nested_ident=0, ids=None) -> bytes | None (labels.py)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "The labels' field scanner, compiled (proxy/triton/labels.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
