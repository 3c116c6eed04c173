/* Where a record's field lives: the one rule the compiled modules use to read and fill slots by offset.
 *
 * replay/_frozen.c fills a new record's slots: it finds a field's slot through its class's member
 * descriptor, and only a plain, writable object slot of that very class will do (anything else and
 * it refuses the class, which then takes the Python path).
 */
#ifndef TRITON_TAP_SLOTS_H
#define TRITON_TAP_SLOTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Python 3.12 put the member types and flags in Python.h under Py_ names and deprecated structmember.h,
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

#endif
