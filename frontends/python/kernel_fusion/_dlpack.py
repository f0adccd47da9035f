"""DLPack structures (layouts from the DLPack 1.x specification) and the Python capsule protocol
(`__dlpack__` / `__dlpack_device__`): capsules named "dltensor" hold a DLManagedTensor,
"dltensor_versioned" a DLManagedTensorVersioned; a consumer renames the capsule to "used_..."
when it takes ownership. The tensors this package exports are released by release_dropped once
their capsules are dropped: the deleter runs for those no consumer took."""

import atexit
import ctypes
import sys
import threading

# DLDeviceType values used here (fixed by the specification).
CPU = 1
CUDA = 2
CUDA_HOST = 3
CUDA_MANAGED = 13


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_LEGACY_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _LEGACY_DELETER),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


_VERSIONED_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _VERSIONED_DELETER),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

LEGACY = b"dltensor"
VERSIONED = b"dltensor_versioned"
USED_LEGACY = b"used_dltensor"
USED_VERSIONED = b"used_dltensor_versioned"

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# Exported capsules not yet released. They carry no destructor: a capsule's destructor can run
# while its consumer's exception is pending (NumPy refusing a bfloat16 tensor drops the capsule
# then), and a destructor written in Python through ctypes cannot keep that exception: it was
# turned into a SystemError and the tensor's deleter never ran. Instead this module keeps each
# capsule it made and releases it (release_dropped) once it alone holds it: the deleter runs if
# no consumer took the tensor (renamed the capsule "used_...").
_exported = []
_exported_lock = threading.Lock()


def _unshared_refcount():
    """sys.getrefcount of a list element that nothing else holds, read as release_dropped reads it."""
    probe = [object()]
    return sys.getrefcount(probe[0])


def make_capsule(managed_address, versioned):
    """A capsule holding the DLManagedTensor(Versioned) at managed_address, kept here until released
    (release_dropped)."""
    release_dropped()
    name = VERSIONED if versioned else LEGACY
    capsule = _api.PyCapsule_New(managed_address, name, None)
    with _exported_lock:
        _exported.append(capsule)
    return capsule


def release_dropped():
    """Releases the exported capsules that only this module still holds: the tensor's deleter runs
    where no consumer took it. Called at every export, when a tensor or context closes, for memory
    statistics, and at exit."""
    unshared = _unshared_refcount()
    # Not blocking: a finalizer (a tensor's __del__, run by a collection inside this very section)
    # or another thread that finds the list busy leaves the release to the next call.
    if not _exported_lock.acquire(blocking=False):
        return
    try:
        dropped = [k for k in range(len(_exported)) if sys.getrefcount(_exported[k]) <= unshared]
        released = [_exported[k] for k in dropped]
        for k in reversed(dropped):
            del _exported[k]
    finally:
        _exported_lock.release()
    for capsule in released:
        name = _api.PyCapsule_GetName(capsule)
        for unused, used, kind in ((VERSIONED, USED_VERSIONED, DLManagedTensorVersioned),
                                   (LEGACY, USED_LEGACY, DLManagedTensor)):
            if name == unused:
                address = _api.PyCapsule_GetPointer(capsule, unused)
                managed = ctypes.cast(address, ctypes.POINTER(kind))
                if managed.contents.deleter:
                    managed.contents.deleter(managed)
                _api.PyCapsule_SetName(capsule, used)  # released: never twice


atexit.register(release_dropped)


def open_capsule(capsule):
    """(address, versioned) of the tensor a producer's capsule holds; BufferError when the capsule
    was consumed already or is not a DLPack capsule."""
    name = _api.PyCapsule_GetName(capsule)
    if name == VERSIONED:
        return _api.PyCapsule_GetPointer(capsule, VERSIONED), True
    if name == LEGACY:
        return _api.PyCapsule_GetPointer(capsule, LEGACY), False
    raise BufferError(f"not an unconsumed DLPack capsule (its name is {name!r})")


def mark_consumed(capsule, versioned):
    """Renames the capsule so that its producer's destructor leaves the tensor to its new owner."""
    if _api.PyCapsule_SetName(capsule, USED_VERSIONED if versioned else USED_LEGACY) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
