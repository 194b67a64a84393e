"""What every family module of the binding shares: loading libchordrt, errors, the struct base class, the
registry of C prototypes, and the plumbing between torch tensors, raw device addresses and the C calls.

Nothing here needs torch or a GPU. The library is loaded on first use, not at import, so that
``import chordrt`` always succeeds; a missing library raises :class:`LibraryNotFoundError` (an
``OSError`` and a :class:`ChordError`) that lists every place that was tried.

A family module (``_glue.py``, ...) mirrors its section of chordrt.h: its structs subclass
:class:`SizedStruct` with ``_c_name_`` (and ``_min_field_`` where the header's MIN_SIZE macro stops
before the last field), and its functions are declared with :func:`prototype`. Everything declared is
applied to the library when it loads. The helpers below without a leading underscore are the package's
shared API; a family module imports nothing private from another.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
import sys
import threading
from pathlib import Path
from typing import Mapping, Optional

#: The ABI this binding mirrors (chordrt.h's CHORD_ABI_VERSION).
ABI_VERSION = 2
#: Environment variable naming the shared library to load (a path).
ENV_LIBRARY = "CHORDRT_LIBRARY"
#: The repository root when the package is used from a source checkout (tools/python/chordrt/_core.py).
REPO_ROOT = Path(__file__).resolve().parents[3]


class Status(enum.IntEnum):
    """chord_status_t."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED = 2
    NO_DRIVER = 3
    NO_DEVICE = 4
    NVRTC_UNAVAILABLE = 5
    COMPILE_FAILED = 6
    CAPTURE_MISS = 7
    STRICT_MISS = 8
    CUDA = 9
    CACHE = 10
    INTERNAL = 11

    @property
    def c_name(self) -> str:
        """The C enumerator's name, e.g. ``CHORD_ERROR_INVALID_ARGUMENT``."""
        return "CHORD_SUCCESS" if self is Status.SUCCESS else f"CHORD_ERROR_{self.name}"


class ChordError(RuntimeError):
    """A failing chordrt call.

    ``status`` is a :class:`Status` (a plain int for values this binding does not know), ``message`` the
    library's ``chord_last_error()`` text (or the binding's own message for checks done in Python).
    ``summary`` carries the partial prewarm summary when prewarm_model() fails to compile some kernels.
    """

    def __init__(self, status, message: str = "", summary: Optional[dict] = None):
        try:
            status = Status(int(status))
        except ValueError:
            status = int(status)
        self.status = status
        self.message = message
        self.summary = summary
        name = status.c_name if isinstance(status, Status) else f"chord status {status}"
        super().__init__(f"{name}: {message}" if message else name)

    def __reduce__(self):
        return (type(self), (int(self.status), self.message, self.summary))


class LibraryNotFoundError(ChordError, OSError):
    """libchordrt.so could not be found or loaded; the message lists what was tried."""

    def __init__(self, message: str):
        super().__init__(Status.UNSUPPORTED, message)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (type(self), (self.message,))


# ---- structs and prototypes ------------------------------------------------------------------------

#: Every struct of chordrt.h mirrored by a family module: C typedef name -> ctypes class (filled as the
#: modules are imported; the layout test compares each against a C compiler).
STRUCTS: dict = {}

#: Every declared C function: name -> (restype, argtypes), filled by the family modules' prototype().
FUNCTIONS: dict = {}


class SizedStruct(ctypes.Structure):
    """A chordrt.h struct whose leading ``size_t struct_size`` is set to sizeof(struct) unless given.

    A subclass naming its C typedef in ``_c_name_`` is registered in :data:`STRUCTS`. ``_min_field_`` is
    the last field of the struct's required part (CHORD_<NAME>_MIN_SIZE); None means the whole struct.
    """

    _c_name_: Optional[str] = None
    _min_field_: Optional[str] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("_c_name_")
        if name is not None:
            if name in STRUCTS and STRUCTS[name] is not cls:
                raise TypeError(f"{name} is mirrored twice ({STRUCTS[name].__qualname__}, {cls.__qualname__})")
            STRUCTS[name] = cls

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not args and "struct_size" not in kwargs:
            self.struct_size = ctypes.sizeof(self)

    @classmethod
    def min_size(cls) -> int:
        """Bytes of the required part: what a caller built against the struct's first version passes."""
        if cls._min_field_ is None:
            return ctypes.sizeof(cls)
        field = getattr(cls, cls._min_field_)
        return field.offset + field.size


# The loaded library (lib() loads it once, under the lock).
_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None

#: chord_status_t (a C enum: int).
STATUS_T = ctypes.c_int
#: A CUstream, and device pointers passed outside a struct: plain integers from Python.
STREAM_T = ctypes.c_void_p


def prototype(name: str, restype, argtypes) -> None:
    """Declares the C function `name` (applied to the library when it loads, or now if it is loaded)."""
    if name in FUNCTIONS:
        raise TypeError(f"{name} is declared twice")
    FUNCTIONS[name] = (restype, list(argtypes))
    if _lib is not None:
        _declare(_lib, {name: FUNCTIONS[name]})


prototype("chord_status_string", ctypes.c_char_p, [STATUS_T])
prototype("chord_last_error", ctypes.c_char_p, [])
prototype("chord_get_version", None, [ctypes.POINTER(ctypes.c_int)] * 3)
prototype("chord_abi_version", ctypes.c_int, [])

# ---- finding and loading the library ---------------------------------------------------------------


def library_candidates(environ: Optional[Mapping[str, str]] = None, repo_root: Optional[Path] = None) -> list:
    """Where the library is looked for, in order.

    ``$CHORDRT_LIBRARY`` when set (and then nothing else); otherwise the repository's build trees
    (``<repo>/build*/libchordrt.so``, most recently built first), then ``ctypes.util.find_library``.
    """
    environ = os.environ if environ is None else environ
    explicit = environ.get(ENV_LIBRARY)
    if explicit:
        return [explicit]
    root = REPO_ROOT if repo_root is None else Path(repo_root)
    builds = []
    for p in root.glob("build*/libchordrt.so"):
        try:
            builds.append((p.stat().st_mtime, str(p)))
        except OSError:  # a dangling symlink
            continue
    out = [path for _, path in sorted(builds, key=lambda t: (-t[0], t[1]))]
    found = ctypes.util.find_library("chordrt")
    if found and found not in out:
        out.append(found)
    return out


def _declare(cdll: ctypes.CDLL, functions: Mapping) -> None:
    for name, (restype, argtypes) in functions.items():
        fn = getattr(cdll, name)  # AttributeError if the library lacks it
        fn.restype = restype
        fn.argtypes = argtypes


def _load() -> ctypes.CDLL:
    global _lib, _lib_path
    tried = []
    for path in library_candidates():
        try:
            cdll = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        try:
            _declare(cdll, {"chord_abi_version": FUNCTIONS["chord_abi_version"]})
        except AttributeError as e:
            tried.append(f"{path}: not a chordrt library ({e})")
            continue
        # The version first: a library of another ABI may lack (or differ in) the other functions.
        abi = cdll.chord_abi_version()
        if abi != ABI_VERSION:
            tried.append(f"{path}: ABI version {abi}, this binding needs {ABI_VERSION}")
            continue
        try:
            _declare(cdll, FUNCTIONS)
        except AttributeError as e:
            tried.append(f"{path}: not a chordrt library ({e})")
            continue
        _lib, _lib_path = cdll, path
        return cdll
    if os.environ.get(ENV_LIBRARY):
        how = f"${ENV_LIBRARY} is set"
    else:
        how = (
            f"${ENV_LIBRARY} is unset; searched {REPO_ROOT}/build*/libchordrt.so and "
            f"ctypes.util.find_library('chordrt') ({ctypes.util.find_library('chordrt') or 'nothing found'})"
        )
    lines = "\n  ".join(tried) if tried else "(no candidate found)"
    raise LibraryNotFoundError(
        f"cannot load libchordrt ({how}); tried:\n  {lines}\n"
        f"Build it (cmake --build <build> --target chordrt) or set {ENV_LIBRARY} to its path."
    )


def lib() -> ctypes.CDLL:
    """The loaded library, every declared function's argtypes/restype set."""
    if _lib is not None:
        return _lib
    with _lock:
        return _lib if _lib is not None else _load()


def library_path() -> str:
    """The path the library was loaded from."""
    lib()
    return _lib_path


def last_error() -> str:
    """chord_last_error(): the message of this thread's last failing call ("" if none)."""
    raw = lib().chord_last_error()
    return raw.decode("utf-8", "replace") if raw else ""


def check(status: int, summary: Optional[dict] = None) -> None:
    """Raises ChordError(status, chord_last_error()) unless status is CHORD_SUCCESS."""
    if status != Status.SUCCESS:
        raise ChordError(status, last_error(), summary)


def status_string(status: int) -> str:
    """chord_status_string()."""
    raw = lib().chord_status_string(int(status))
    return raw.decode("utf-8", "replace") if raw else ""


# ---- arguments: raw values ---------------------------------------------------------------------------


def invalid(op: str, message: str) -> ChordError:
    """The binding's own INVALID_ARGUMENT error for `op` (to raise)."""
    return ChordError(Status.INVALID_ARGUMENT, f"{op}: {message}")


def check_int(value, op: str, name: str) -> int:
    """An int (bools and floats rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(op, f"{name} must be an int, got {type(value).__name__}")
    return value


def address(value, op: str, name: str) -> int:
    """A raw device address: an int (None = NULL)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(op, f"{name} must be a device address (int) or, with torch, a tensor; got {type(value).__name__}")
    if value < 0:
        raise invalid(op, f"{name} must be a non-negative address, got {value}")
    return value


def size(value, op: str, name: str, required: bool = True) -> int:
    """An explicit size of a raw-pointer call: an int; None is an error when required, else 0."""
    if value is None:
        if required:
            raise invalid(op, f"{name} is required when passing raw device pointers")
        return 0
    return check_int(value, op, name)


def flag(value, op: str, name: str) -> int:
    """A C int flag from a bool or an int (an int is passed on as it is, for the library to judge)."""
    if isinstance(value, bool):
        return int(value)
    return check_int(value, op, name)


def enum_value(cls, value, what: str):
    """A member of the IntEnum `cls` from a member, an int or a name; ValueError otherwise."""
    if isinstance(value, str):
        try:
            return cls[value.upper()]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls)
            raise ValueError(f"{value!r} is not a valid {cls.__name__} ({names})") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a {cls.__name__}, an int or a name, got {type(value).__name__}")
    return cls(value)


def c_string(value, name: str) -> bytes:
    """A C string argument from a str, bytes or path."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if hasattr(value, "__fspath__"):
        return os.fsencode(value)
    raise ChordError(Status.INVALID_ARGUMENT, f"{name} must be a str, got {type(value).__name__}")


def raw_stream(stream) -> int:
    """A CUstream from None (the legacy default stream, 0), an int or a torch.cuda.Stream."""
    if stream is None:
        return 0
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream / ExternalStream
        return int(stream.cuda_stream)
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise ChordError(Status.INVALID_ARGUMENT, f"stream must be a CUstream (int) or a torch.cuda.Stream, got {stream!r}")
    return stream


# ---- arguments: torch tensors -----------------------------------------------------------------------


def torch_module_of(*values):
    """torch, when any value is a torch.Tensor (torch is then already imported), else None.

    torch is never imported by the binding: a tensor argument implies the caller already imported it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for v in values:
        if isinstance(v, torch.Tensor):
            return torch
    return None


class TorchCall:
    """Checks the tensors of one torch-mode call and provides its device, stream and device guard."""

    def __init__(self, torch, op: str, stream):
        self.torch = torch
        self.op = op
        self.device = None
        self._stream = stream

    def tensor(self, t, name: str, dtype, ndim=None, shape=None, min_numel=None):
        torch, op = self.torch, self.op
        if not isinstance(t, torch.Tensor):
            raise invalid(op, f"{name} must be a torch.Tensor like the other arguments, got {type(t).__name__}")
        if t.dtype != dtype:
            raise invalid(op, f"{name} must be {dtype}, got {t.dtype}")
        if t.device.type != "cuda":
            raise invalid(op, f"{name} must be on a CUDA device, got {t.device}")
        if self.device is None:
            self.device = t.device
        elif t.device != self.device:
            raise invalid(op, f"{name} is on {t.device} but the other tensors are on {self.device}")
        if not t.is_contiguous():
            raise invalid(op, f"{name} must be contiguous (shape {tuple(t.shape)}, strides {t.stride()})")
        if ndim is not None and t.dim() != ndim:
            raise invalid(op, f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise invalid(op, f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
        if min_numel is not None and t.numel() < min_numel:
            raise invalid(op, f"{name} must have at least {min_numel} elements, got {t.numel()}")
        return t

    def stream(self) -> int:
        if self._stream is not None:
            return raw_stream(self._stream)
        return int(self.torch.cuda.current_stream(self.device).cuda_stream)

    def guard(self):
        # With the legacy default stream (0) the runtime launches in the current context: make it the
        # tensors' device's primary context.
        return self.torch.cuda.device(self.device)
