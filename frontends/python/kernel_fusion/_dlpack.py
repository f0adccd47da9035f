"""DLPack structures (layouts from the DLPack 1.x specification) and the Python capsule protocol
(`__dlpack__` / `__dlpack_device__`): capsules named "dltensor" hold a DLManagedTensor,
"dltensor_versioned" a DLManagedTensorVersioned; a consumer renames the capsule to "used_..."
when it takes ownership, and an unconsumed capsule's destructor calls the tensor's deleter."""

import ctypes

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
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# The capsule functions again, taking the capsule as a bare address: the destructor runs while the
# capsule is being freed and must not make references to it.
_is_valid_at = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_pointer_at = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)


@_DESTRUCTOR
def _destroy_capsule(address):
    # A capsule that a consumer renamed ("used_...") is that consumer's to release.
    for name, kind in ((VERSIONED, DLManagedTensorVersioned), (LEGACY, DLManagedTensor)):
        if _is_valid_at(address, name):
            managed = ctypes.cast(_pointer_at(address, name), ctypes.POINTER(kind))
            if managed.contents.deleter:
                managed.contents.deleter(managed)
            return


def make_capsule(managed_address, versioned):
    """A capsule owning the DLManagedTensor(Versioned) at managed_address."""
    name = VERSIONED if versioned else LEGACY
    return _api.PyCapsule_New(managed_address, name, ctypes.cast(_destroy_capsule, ctypes.c_void_p))


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
