/* Frozen slots dataclasses built in one call: Maker(cls, names, leading, defaults).make(*leading values, fields).
 *
 * Why: the relay builds one `message` record per gRPC message, from a few values it knows (time,
 * call, direction, index, size, flag) and a dict of labels. As Python (replay/frozen.py: the
 * non-frozen twin's __init__ with **fields, then __class__ assigned) that call was ~11 % of the proxy's
 * per-response work (py-spy, issue 18): keyword matching of ~8 names against 24 parameters, then one
 * store per field. Here the instance is allocated and its slots filled directly, by offset.
 *
 * Same answers as the Python version (tests/replay/test_frozen.py): every field set, defaults where
 * not given, TypeError for an unknown name, a name given twice, a required field missing or a key that
 * is not a str. It never
 * runs the class's __init__ (the twin's Python path does not either) and refuses, at construction,
 * classes it cannot fill that way (a slot that is not a plain object slot of `cls`), which then take
 * the Python path. Pure: no I/O, no state but the plan.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Where a record's field lives: its class's member descriptor, and only a plain, writable object slot
 * of that very class will do (anything else and Maker refuses the class, which then takes the Python
 * path).
 *
 * Python 3.12 put the member types and flags in Python.h under Py_ names and deprecated structmember.h,
 * where 3.11 has them, under the old names, alone. */
#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

/* The offset of the slot `descr` describes, or -1 when it is not a plain object slot (of `cls`, and
 * within its instances, when `cls` is given). Sets no error: the caller says what it was doing. */
static inline Py_ssize_t plain_slot(PyObject *descr, PyTypeObject *cls) {
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type))
        return -1;
    PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
    if (m->type != Py_T_OBJECT_EX || (m->flags & Py_READONLY) || m->offset <= 0)
        return -1;
    if (cls != NULL && (((PyDescrObject *)descr)->d_type != cls ||
                        m->offset + (Py_ssize_t)sizeof(PyObject *) > cls->tp_basicsize))
        return -1;
    return m->offset;
}

/* `cls`'s own namespace (a new reference; NULL, with no error, when it has none). From 3.12 a static
 * built-in type (int, str, ...) keeps its namespace per interpreter and its tp_dict is NULL: read
 * there, a class such as int crashed the caller where 3.11 refused it; PyType_GetDict is the public way. */
static inline PyObject *own_namespace(PyTypeObject *cls) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyType_GetDict(cls);
#else
    return Py_XNewRef(cls->tp_dict);
#endif
}

/* The offset of field `name`'s slot in instances of `cls`, or -1 with TypeError set (`who` names the caller). */
static inline Py_ssize_t field_slot(PyTypeObject *cls, PyObject *name, const char *who) {
    PyObject *ns = own_namespace(cls);
    PyObject *descr = ns == NULL ? NULL : PyDict_GetItemWithError(ns, name); /* borrowed: ns holds it */
    if (descr == NULL && PyErr_Occurred()) {
        Py_XDECREF(ns);
        return -1;
    }
    Py_ssize_t offset = plain_slot(descr, cls);
    Py_XDECREF(ns);
    if (offset < 0)
        PyErr_Format(PyExc_TypeError, "%s: %R is not a plain object slot of %s", who, name, cls->tp_name);
    return offset;
}

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    Py_ssize_t nfields, nleading;
    Py_ssize_t *offset;   /* per field, its slot's offset in the instance */
    PyObject **defaults;  /* per field, its default, or NULL when required */
    PyObject *index;      /* name -> field number (int) */
    PyObject *names;      /* tuple of the field names */
} Maker;

static void maker_dealloc(Maker *m) {
    if (m->defaults != NULL)
        for (Py_ssize_t k = 0; k < m->nfields; k++)
            Py_XDECREF(m->defaults[k]);
    PyMem_Free(m->defaults);
    PyMem_Free(m->offset);
    Py_XDECREF(m->cls);
    Py_XDECREF(m->index);
    Py_XDECREF(m->names);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* Maker(cls, names, nleading, defaults): `names` the fields in order, the first `nleading` given
 * positionally to make(); `defaults` a tuple with each field's default or `missing` (required). */
static int maker_init(Maker *m, PyObject *args, PyObject *kwds) {
    PyTypeObject *cls;
    PyObject *names, *defaults, *missing;
    Py_ssize_t nleading;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "Maker takes positional arguments only");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!O!nO!O", &PyType_Type, &cls, &PyTuple_Type, &names, &nleading, &PyTuple_Type,
                          &defaults, &missing))
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(defaults) != n || nleading < 0 || nleading > n) {
        PyErr_SetString(PyExc_ValueError, "Maker: names, nleading and defaults do not match");
        return -1;
    }
    if (m->offset != NULL) { /* a second __init__ would leak the first one's tables, or mix two plans */
        PyErr_SetString(PyExc_TypeError, "Maker: already initialised");
        return -1;
    }
    m->offset = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    m->defaults = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    m->index = PyDict_New();
    if (m->offset == NULL || m->defaults == NULL || m->index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    m->nfields = n;
    m->nleading = nleading;
    m->names = Py_NewRef(names);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *name = PyTuple_GET_ITEM(names, k);
        m->offset[k] = field_slot(cls, name, "Maker");
        if (m->offset[k] < 0)
            return -1;
        PyObject *d = PyTuple_GET_ITEM(defaults, k);
        m->defaults[k] = d == missing ? NULL : Py_NewRef(d);
        PyObject *num = PyLong_FromSsize_t(k);
        if (num == NULL || PyDict_SetItem(m->index, name, num) < 0) {
            Py_XDECREF(num);
            return -1;
        }
        Py_DECREF(num);
    }
    /* Set last: make() takes a Maker with a class as one whose every offset is known (an __init__ that
     * failed half-way, or none at all, leaves it unusable: TypeError, not a write at offset -1). */
    m->cls = (PyTypeObject *)Py_NewRef(cls);
    return 0;
}

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

#define SMALL 32 /* names held on the stack; a larger dict takes the heap */

/* make(v0, ..., v[nleading-1], fields): a new instance of cls. Hot path: once per message record.
 *
 * The dict's items are taken first, held, as a call with **fields takes them: matching a name may
 * run Python code (a str subclass's __eq__) that changes the dict, which would free what PyDict_Next
 * lent, and the call binds what the dict held when it was made. */
static PyObject *maker_make(Maker *m, PyObject *const *args, Py_ssize_t nargs) {
    if (m->cls == NULL) {
        PyErr_SetString(PyExc_TypeError, "make(): the Maker was not initialised");
        return NULL;
    }
    if (nargs != m->nleading + 1 || !PyDict_Check(args[nargs - 1])) {
        PyErr_Format(PyExc_TypeError, "make() takes %zd values and a dict", m->nleading);
        return NULL;
    }
    PyObject *fields = args[nargs - 1];
    Py_ssize_t n = PyDict_GET_SIZE(fields), got = 0, pos = 0;
    PyObject *small[2 * SMALL], *key, *value;
    PyObject **items = n <= SMALL ? small : PyMem_Malloc((size_t)n * 2 * sizeof(PyObject *));
    if (items == NULL)
        return PyErr_NoMemory();
    while (got < n && PyDict_Next(fields, &pos, &key, &value)) { /* runs no Python code */
        items[2 * got] = Py_NewRef(key);
        items[2 * got + 1] = Py_NewRef(value);
        got++;
    }
    PyObject *obj = NULL, *unknown = NULL, *twice = NULL; /* borrowed from items */
    for (Py_ssize_t i = 0; i < got; i++) {
        if (!PyUnicode_Check(items[2 * i])) { /* as the call says, before it matches any name */
            PyErr_SetString(PyExc_TypeError, "keywords must be strings");
            goto done;
        }
    }
    obj = m->cls->tp_alloc(m->cls, 0); /* slots all NULL */
    if (obj == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < m->nleading; k++)
        SLOT(obj, m->offset[k]) = Py_NewRef(args[k]);
    for (Py_ssize_t i = 0; i < got; i++) {
        key = items[2 * i];
        PyObject *num = PyDict_GetItemWithError(m->index, key); /* borrowed: the index is ours alone */
        if (num == NULL) {
            if (PyErr_Occurred())
                goto fail;
            if (unknown == NULL)
                unknown = key;
            continue;
        }
        Py_ssize_t k = PyLong_AsSsize_t(num);
        if (k < m->nleading || SLOT(obj, m->offset[k]) != NULL) {
            /* a leading field, or a name met twice (two keys a str subclass's __eq__ made equal) */
            if (twice == NULL)
                twice = key;
            continue;
        }
        SLOT(obj, m->offset[k]) = Py_NewRef(items[2 * i + 1]);
    }
    /* Python's order of complaints: a name given twice (when the keywords are merged), then the first
     * unknown name (when they are bound) */
    if (twice != NULL || unknown != NULL) {
        if (twice != NULL)
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for keyword argument %R", m->cls->tp_name, twice);
        else
            PyErr_Format(PyExc_TypeError, "%s.__init__() got an unexpected keyword argument %R", m->cls->tp_name, unknown);
        goto fail;
    }
    for (Py_ssize_t k = m->nleading; k < m->nfields; k++) {
        if (SLOT(obj, m->offset[k]) != NULL)
            continue;
        if (m->defaults[k] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s.__init__() missing 1 required keyword-only argument: %R", m->cls->tp_name,
                         PyTuple_GET_ITEM(m->names, k));
            goto fail;
        }
        SLOT(obj, m->offset[k]) = Py_NewRef(m->defaults[k]);
    }
    goto done;
fail:
    Py_CLEAR(obj);
done:
    for (Py_ssize_t i = 0; i < 2 * got; i++)
        Py_DECREF(items[i]);
    if (items != small)
        PyMem_Free(items);
    return obj;
}

static PyMethodDef maker_methods[] = {
    {"make", (PyCFunction)(void (*)(void))maker_make, METH_FASTCALL,
     "make(*leading values, fields) -> a new instance (replay/frozen.py maker)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "replay._frozen.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_dealloc = (destructor)maker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Builds instances of one frozen slots dataclass by filling their slots (replay/frozen.py).",
    .tp_methods = maker_methods,
    .tp_init = (initproc)maker_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_frozen", "Frozen slots dataclasses built in one call (replay/frozen.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__frozen(void) {
    if (PyType_Ready(&MakerType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL)
        return NULL;
    if (PyModule_AddObjectRef(mod, "Maker", (PyObject *)&MakerType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
