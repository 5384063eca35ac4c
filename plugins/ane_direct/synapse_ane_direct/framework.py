"""ctypes bindings to the Objective-C runtime, Foundation, IOSurface and Apple's
private AppleNeuralEngine framework: exactly the calls :mod:`.hardware` makes.

NEVER RUN ON A MAC: no call into these libraries has ever been made. It was
written on Linux from public sources and must be verified on a Mac (see the
project's ``docs/ane-direct.md``); on Linux only the refusal of
:meth:`Runtime.open` runs. Importing this module loads nothing;
:meth:`Runtime.open` does.

Every Objective-C message is sent through ``objc_msgSend`` cast to the exact
prototype of the method (on arm64 a variadic call passes arguments
differently, so the prototype must be exact). Each prototype is written down in
:data:`SIGNATURES` with where it is declared:

- *Foundation*, *IOSurface*, *CoreFoundation*, *objc*: Apple's public SDK
  headers (``Foundation/NSData.h`` etc., ``IOSurface/IOSurfaceRef.h``,
  ``CoreFoundation/CFBase.h``, ``objc/runtime.h``, ``objc/message.h``).
- *AppleNeuralEngine*: a private framework with no public header. The
  selectors and argument types are those maderix/ANE calls
  (``training/ane_runtime.h``: the in-memory model descriptor taking MIL text
  and a weights dictionary, compile/load/evaluate/unload with QoS 21, requests
  over IOSurface-backed buffers, ``_ANEClient sharedConnection``).
  hollance/neural-engine documents the background: there is no public API,
  only the private frameworks Core ML uses, and the engine computes in 16-bit
  floats. A macOS update may change any of them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import attrs

LIBOBJC = "/usr/lib/libobjc.A.dylib"
FOUNDATION = "/System/Library/Frameworks/Foundation.framework/Foundation"
COREFOUNDATION = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
IOSURFACE = "/System/Library/Frameworks/IOSurface.framework/IOSurface"
ANE_FRAMEWORK = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework"
ANE_BINARY = f"{ANE_FRAMEWORK}/AppleNeuralEngine"
#: The QoS value every public project passes to compile/load/evaluate/unload.
QOS = 21
#: ``kIOSurfaceLockReadOnly`` (IOSurface/IOSurfaceTypes.h).
LOCK_READ_ONLY = 1

_id = ctypes.c_void_p
_SEL = ctypes.c_void_p
_BOOL = ctypes.c_bool
_UInt = ctypes.c_uint
_NSUInteger = ctypes.c_ulong
_NSInteger = ctypes.c_long
_ptr = ctypes.c_void_p
_err = ctypes.POINTER(ctypes.c_void_p)  # NSError **


@attrs.frozen
class Signature:
    """One Objective-C method: its C prototype after ``(id self, SEL _cmd)``."""

    restype: Any
    argtypes: tuple[Any, ...]
    declared: str


_REQUEST = (
    "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:"
)

#: selector -> prototype and where it is declared
SIGNATURES: dict[str, Signature] = {
    # -- AppleNeuralEngine (private; selectors as maderix/ANE calls them) --------
    "hasANE": Signature(_BOOL, (), "+[_ANEDeviceInfo hasANE] (AppleNeuralEngine, private)"),
    "sharedConnection": Signature(
        _id, (), "+[_ANEClient sharedConnection] (AppleNeuralEngine, private)"
    ),
    "modelWithMILText:weights:optionsPlist:": Signature(
        _id,
        (_id, _id, _id),
        "+[_ANEInMemoryModelDescriptor modelWithMILText:(NSData *) weights:(NSDictionary *) "
        "optionsPlist:(NSDictionary *)] (AppleNeuralEngine, private)",
    ),
    "inMemoryModelWithDescriptor:": Signature(
        _id, (_id,), "+[_ANEInMemoryModel inMemoryModelWithDescriptor:(id)] (private)"
    ),
    "hexStringIdentifier": Signature(
        _id, (), "-[_ANEInMemoryModel hexStringIdentifier] -> NSString * (private)"
    ),
    "compileWithQoS:options:error:": Signature(
        _BOOL,
        (_UInt, _id, _err),
        "-[_ANEInMemoryModel compileWithQoS:(unsigned int) options:(NSDictionary *) "
        "error:(NSError **)] -> BOOL (private)",
    ),
    "loadWithQoS:options:error:": Signature(
        _BOOL,
        (_UInt, _id, _err),
        "-[_ANEInMemoryModel loadWithQoS:(unsigned int) options:(NSDictionary *) "
        "error:(NSError **)] -> BOOL (private)",
    ),
    "evaluateWithQoS:options:request:error:": Signature(
        _BOOL,
        (_UInt, _id, _id, _err),
        "-[_ANEInMemoryModel evaluateWithQoS:(unsigned int) options:(NSDictionary *) "
        "request:(_ANERequest *) error:(NSError **)] -> BOOL (private)",
    ),
    "unloadWithQoS:error:": Signature(
        _BOOL,
        (_UInt, _err),
        "-[_ANEInMemoryModel unloadWithQoS:(unsigned int) error:(NSError **)] -> BOOL (private)",
    ),
    "objectWithIOSurface:": Signature(
        _id, (_ptr,), "+[_ANEIOSurfaceObject objectWithIOSurface:(IOSurfaceRef)] (private)"
    ),
    _REQUEST: (
        Signature(
            _id,
            (_id, _id, _id, _id, _id, _id, _id),
            "+[_ANERequest requestWithInputs:(NSArray *) inputIndices:(NSArray<NSNumber *> *) "
            "outputs:(NSArray *) outputIndices:(NSArray<NSNumber *> *) weightsBuffer:(id) "
            "perfStats:(id) procedureIndex:(NSNumber *)] (private)",
        )
    ),
    # -- Foundation (public headers) ---------------------------------------------
    "dataWithBytes:length:": Signature(
        _id, (_ptr, _NSUInteger), "+[NSData dataWithBytes:length:] (Foundation/NSData.h)"
    ),
    "stringWithUTF8String:": Signature(
        _id, (ctypes.c_char_p,), "+[NSString stringWithUTF8String:] (Foundation/NSString.h)"
    ),
    "UTF8String": Signature(ctypes.c_char_p, (), "-[NSString UTF8String] (Foundation/NSString.h)"),
    "numberWithUnsignedLongLong:": Signature(
        _id, (ctypes.c_ulonglong,), "+[NSNumber numberWithUnsignedLongLong:] (Foundation/NSValue.h)"
    ),
    "dictionaryWithObjects:forKeys:count:": Signature(
        _id,
        (_ptr, _ptr, _NSUInteger),
        "+[NSDictionary dictionaryWithObjects:forKeys:count:] (Foundation/NSDictionary.h)",
    ),
    "arrayWithObjects:count:": Signature(
        _id, (_ptr, _NSUInteger), "+[NSArray arrayWithObjects:count:] (Foundation/NSArray.h)"
    ),
    "domain": Signature(_id, (), "-[NSError domain] (Foundation/NSError.h)"),
    "code": Signature(_NSInteger, (), "-[NSError code] (Foundation/NSError.h)"),
    "localizedDescription": Signature(
        _id, (), "-[NSError localizedDescription] (Foundation/NSError.h)"
    ),
    "retain": Signature(_id, (), "-[NSObject retain] (objc/NSObject.h)"),
    "release": Signature(None, (), "-[NSObject release] (objc/NSObject.h)"),
}

#: C functions: name -> (restype, argtypes, library, where declared)
FUNCTIONS: dict[str, tuple[Any, tuple[Any, ...], str, str]] = {
    "objc_getClass": (_id, (ctypes.c_char_p,), LIBOBJC, "objc/runtime.h"),
    "sel_registerName": (_SEL, (ctypes.c_char_p,), LIBOBJC, "objc/runtime.h"),
    "objc_autoreleasePoolPush": (_ptr, (), LIBOBJC, "objc/objc-internal.h (exported by libobjc)"),
    "objc_autoreleasePoolPop": (
        None,
        (_ptr,),
        LIBOBJC,
        "objc/objc-internal.h (exported by libobjc)",
    ),
    "NSTemporaryDirectory": (_id, (), FOUNDATION, "Foundation/NSPathUtilities.h"),
    "IOSurfaceCreate": (_ptr, (_id,), IOSURFACE, "IOSurface/IOSurfaceRef.h (CFDictionaryRef arg)"),
    "IOSurfaceLock": (
        ctypes.c_int,
        (_ptr, ctypes.c_uint32, _ptr),
        IOSURFACE,
        "IOSurface/IOSurfaceRef.h",
    ),
    "IOSurfaceUnlock": (
        ctypes.c_int,
        (_ptr, ctypes.c_uint32, _ptr),
        IOSURFACE,
        "IOSurface/IOSurfaceRef.h",
    ),
    "IOSurfaceGetBaseAddress": (_ptr, (_ptr,), IOSURFACE, "IOSurface/IOSurfaceRef.h"),
    "IOSurfaceGetAllocSize": (ctypes.c_size_t, (_ptr,), IOSURFACE, "IOSurface/IOSurfaceRef.h"),
    "CFRelease": (None, (_ptr,), COREFOUNDATION, "CoreFoundation/CFBase.h"),
}
#: IOSurface property keys (CFStringRef globals, IOSurface/IOSurfaceRef.h).
SURFACE_KEYS = (
    "kIOSurfaceWidth",
    "kIOSurfaceHeight",
    "kIOSurfaceBytesPerElement",
    "kIOSurfaceBytesPerRow",
    "kIOSurfaceAllocSize",
    "kIOSurfacePixelFormat",
)
#: Classes looked up by name.
CLASSES = (
    "_ANEClient",
    "_ANEDeviceInfo",
    "_ANEInMemoryModelDescriptor",
    "_ANEInMemoryModel",
    "_ANERequest",
    "_ANEIOSurfaceObject",
    "NSData",
    "NSString",
    "NSNumber",
    "NSDictionary",
    "NSArray",
)


class FrameworkMissing(Exception):
    """A library, class or symbol is not on this system; the message names it."""


@attrs.frozen
class NSErrorInfo:
    domain: str
    code: int
    description: str

    def __str__(self) -> str:
        return f"{self.description} ({self.domain} code {self.code})"


class Runtime:
    """The loaded libraries, resolved classes and typed ``objc_msgSend`` prototypes."""

    def __init__(self) -> None:
        self._libs: dict[str, ctypes.CDLL] = {}
        self._fns: dict[str, Any] = {}
        self._sends: dict[str, Any] = {}
        self._sels: dict[str, int] = {}
        self.classes: dict[str, int] = {}
        self.keys: dict[str, int] = {}

    @classmethod
    def open(cls) -> Runtime:
        """Load everything; :class:`FrameworkMissing` names what is not there."""
        rt = cls()
        for path in (LIBOBJC, FOUNDATION, COREFOUNDATION, IOSURFACE, ANE_BINARY):
            try:
                rt._libs[path] = ctypes.CDLL(path)  # the framework registers its classes
            except OSError as exc:
                raise FrameworkMissing(f"cannot load {path}: {exc}") from None
        for name, (restype, argtypes, lib, _) in FUNCTIONS.items():
            try:
                fn = getattr(rt._libs[lib], name)
            except AttributeError:
                raise FrameworkMissing(f"{lib} has no {name}") from None
            fn.restype, fn.argtypes = restype, list(argtypes)
            rt._fns[name] = fn
        for name in CLASSES:
            pointer = rt._fns["objc_getClass"](name.encode())
            if not pointer:
                raise FrameworkMissing(
                    f"class {name} is not registered: this macOS build's frameworks differ "
                    "from the ones Synapse was written against"
                )
            rt.classes[name] = pointer
        for key in SURFACE_KEYS:
            try:
                rt.keys[key] = ctypes.c_void_p.in_dll(rt._libs[IOSURFACE], key).value or 0
            except ValueError:
                raise FrameworkMissing(f"{IOSURFACE} has no {key}") from None
        objc = rt._libs[LIBOBJC]
        for selector, sig in SIGNATURES.items():
            proto = ctypes.CFUNCTYPE(sig.restype, _id, _SEL, *sig.argtypes)
            rt._sends[selector] = proto(("objc_msgSend", objc))
        return rt

    def fn(self, name: str) -> Any:
        return self._fns[name]

    def sel(self, name: str) -> int:
        if name not in self._sels:
            self._sels[name] = self._fns["sel_registerName"](name.encode())
        return self._sels[name]

    def send(self, receiver: int, selector: str, *args: Any) -> Any:
        """``[receiver selector args...]`` through the selector's own prototype."""
        if not receiver:
            raise ValueError(f"message {selector} sent to nil")
        return self._sends[selector](receiver, self.sel(selector), *args)

    # -- Foundation helpers -------------------------------------------------------

    def string(self, text: str) -> int:
        return int(self.send(self.classes["NSString"], "stringWithUTF8String:", text.encode()))

    def text(self, nsstring: int | None) -> str:
        if not nsstring:
            return ""
        raw = self.send(nsstring, "UTF8String")
        return raw.decode("utf-8", "replace") if raw else ""

    def data(self, payload: bytes) -> int:
        buf = ctypes.create_string_buffer(payload, len(payload))
        return int(self.send(self.classes["NSData"], "dataWithBytes:length:", buf, len(payload)))

    def number(self, value: int) -> int:
        return int(self.send(self.classes["NSNumber"], "numberWithUnsignedLongLong:", value))

    def array(self, items: Sequence[int]) -> int:
        objects = (ctypes.c_void_p * len(items))(*items)
        return int(
            self.send(self.classes["NSArray"], "arrayWithObjects:count:", objects, len(items))
        )

    def dictionary(self, pairs: Sequence[tuple[int, int]]) -> int:
        keys = (ctypes.c_void_p * len(pairs))(*(k for k, _ in pairs))
        values = (ctypes.c_void_p * len(pairs))(*(v for _, v in pairs))
        return int(
            self.send(
                self.classes["NSDictionary"],
                "dictionaryWithObjects:forKeys:count:",
                values,
                keys,
                len(pairs),
            )
        )

    def error_info(self, error: int | None) -> NSErrorInfo:
        if not error:
            return NSErrorInfo("(none)", 0, "the framework failed without an NSError")
        return NSErrorInfo(
            self.text(self.send(error, "domain")),
            int(self.send(error, "code")),
            self.text(self.send(error, "localizedDescription")),
        )

    def retain(self, obj: int) -> int:
        return int(self.send(obj, "retain"))

    def release(self, obj: int | None) -> None:
        if obj:
            self.send(obj, "release")


class AutoreleasePool:
    """``@autoreleasepool { ... }`` for the calls of one block."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._token: int | None = None

    def __enter__(self) -> None:
        self._token = self._rt.fn("objc_autoreleasePoolPush")()

    def __exit__(self, *exc: object) -> None:
        self._rt.fn("objc_autoreleasePoolPop")(self._token)
