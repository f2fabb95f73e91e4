"""Reading trainpack checkpoints without LibTorch (Python standard library only).

A checkpoint (docs/save-load.md, "What a checkpoint holds") is a zip archive written by
torch::pickle_save: `<archive>/data.pkl` pickles a Dict[str, Tensor] whose tensors point at the
storages `<archive>/data/<key>`; the zip's comment is trainpack's trailer
`trainpack-checkpoint 2 entries=<n> crc32c=<8 hex>`, the CRC-32C of every byte before it.

inspect() checks all of that the way the loader does (trailer, checksum, entry count) and also
parses the pickle, so that a checkpoint it calls valid is one the job can read; it reports the
counters and whether every floating-point tensor is finite. make_foreign() turns a valid
checkpoint into a valid checkpoint of "another model": the same file with every module entry
renamed, so that no parameter of the main job's model matches.
"""

import array
import hashlib
import io
import math
import os
import pickle
import re
import struct
import sys
import zipfile

TRAILER = re.compile(rb"^trainpack-checkpoint 2 entries=(\d+) crc32c=([0-9a-f]{8})$")
END_RECORD = b"PK\x05\x06"

# ---- CRC-32C (Castagnoli), the checksum of the trailer ----

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---- the pickle, read without torch ----

_STORAGE_TYPES = {
    "FloatStorage": "f",
    "DoubleStorage": "d",
    "LongStorage": "q",
    "IntStorage": "i",
    "ShortStorage": "h",
    "CharStorage": "b",
    "ByteStorage": "B",
    "BoolStorage": "B",
    "HalfStorage": None,  # floating point, checked byte-wise below
    "BFloat16Storage": None,
}


class _Storage:
    def __init__(self, name):
        self.name = name


class Tensor:
    """A tensor of the checkpoint: its storage type, storage key, offset, shape and stride."""

    def __init__(self, storage, offset, shape, stride):
        _, storage_type, self.key, _location, self.numel_storage = storage
        self.storage_type = storage_type.name
        self.offset = offset
        self.shape = tuple(shape)
        self.stride = tuple(stride)


def _rebuild_tensor_v2(storage, offset, shape, stride, *_rest):
    return Tensor(storage, offset, shape, stride)


def _restore_type_tag(value, _tag):
    return value


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
            return _restore_type_tag
        if (module, name) == ("collections", "OrderedDict"):
            return dict
        if module == "torch" and name in _STORAGE_TYPES:
            return _Storage(name)
        raise pickle.UnpicklingError(f"unexpected global {module}.{name}")

    def persistent_load(self, pid):
        return pid


def _values(z, prefix, tensor):
    """The tensor's elements (a flat array), for the integer and float32/64 storage types."""
    code = _STORAGE_TYPES[tensor.storage_type]
    raw = z.read(f"{prefix}data/{tensor.key}")
    values = array.array(code)
    values.frombytes(raw[: len(raw) - len(raw) % values.itemsize])
    if sys.byteorder != "little":
        values.byteswap()
    return values


class Info:
    """What inspect() found: valid (bool), why (the reason when not), entries (name -> Tensor),
    counters (name -> int), finite (all floating-point tensors finite), nonfinite (their names),
    digest (sha256 of the bytes)."""

    def __init__(self):
        self.valid = False
        self.why = ""
        self.entries = {}
        self.counters = {}
        self.finite = True
        self.nonfinite = []
        self.digest = ""
        self.learning_rate = None

    @property
    def global_step(self):
        return self.counters.get("trainer/global_step")


def _read_regular(path, limit=64 << 20):
    """The bytes of a regular file (never a FIFO or a device); None otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        import stat as _stat

        if not _stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def inspect(path):
    info = Info()
    try:
        data = _read_regular(path)
    except OSError as e:
        info.why = f"cannot read: {e.strerror}"
        return info
    if data is None:
        info.why = "not a regular file of a sensible size"
        return info
    info.digest = hashlib.sha256(data).hexdigest()
    if not data:
        info.why = "empty"
        return info
    at = -1
    for back in range(22, min(len(data), 22 + 128) + 1):
        start = len(data) - back
        if data[start : start + 4] == END_RECORD and struct.unpack_from(
            "<H", data, start + 20
        )[0] == back - 22:
            at = start + 22
            break
    if at < 0:
        info.why = "no zip end record with a trailer (truncated?)"
        return info
    m = TRAILER.match(data[at:])
    if not m:
        info.why = f"malformed trailer {data[at:]!r}"
        return info
    if crc32c(data[:at]) != int(m.group(2), 16):
        info.why = "checksum mismatch"
        return info
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            info.why = "no data.pkl"
            return info
        prefix = pkl[0][: -len("data.pkl")]
        entries = _Unpickler(io.BytesIO(z.read(pkl[0]))).load()
        if not isinstance(entries, dict):
            info.why = "data.pkl is not a dict"
            return info
        if len(entries) != int(m.group(1)):
            info.why = f"{len(entries)} entries, the trailer says {m.group(1)}"
            return info
        for name, tensor in entries.items():
            if not isinstance(tensor, Tensor):
                continue
            kind = _STORAGE_TYPES.get(tensor.storage_type, "?")
            if kind in ("f", "d"):
                values = _values(z, prefix, tensor)
                # A float sum in double precision cannot overflow for these sizes, so it is
                # finite exactly when every element is.
                if not math.isfinite(sum(values)):
                    info.finite = False
                    info.nonfinite.append(name)
                if name == "variable/learning_rate" and len(values) > tensor.offset:
                    info.learning_rate = values[tensor.offset]
            elif kind == "q" and name.startswith("trainer/"):
                values = _values(z, prefix, tensor)
                info.counters[name] = values[tensor.offset]
        info.entries = entries
    except Exception as e:  # noqa: BLE001 - any parse failure makes the file invalid
        info.why = f"unreadable archive: {type(e).__name__}: {e}"
        return info
    info.valid = True
    return info


def module_entries(path):
    """The module entries of a valid checkpoint (parameters and buffers: names without '/'), as
    the raw bytes of their storages; None when the file is not a valid checkpoint."""
    info = inspect(path)
    if not info.valid:
        return None
    with open(path, "rb") as f:
        z = zipfile.ZipFile(io.BytesIO(f.read()))
    prefix = [n for n in z.namelist() if n.endswith("/data.pkl")][0][: -len("data.pkl")]
    return {name: z.read(f"{prefix}data/{tensor.key}")
            for name, tensor in info.entries.items()
            if "/" not in name and isinstance(tensor, Tensor)}


def _rename_entries(src, dst, new_name):
    """Writes to `dst` the checkpoint `src` with every entry `name` for which new_name(name) is
    not None renamed to that (a name of the same length or not), the archive and trailer rebuilt
    so that the result is valid. Returns how many entries were renamed."""
    zin = zipfile.ZipFile(src)
    pkl = [n for n in zin.namelist() if n.endswith("/data.pkl")][0]
    data = zin.read(pkl)
    entries = _Unpickler(io.BytesIO(data)).load()
    renamed = 0
    for name in entries:
        new = new_name(name)
        if new is None:
            continue
        raw = name.encode()
        old = b"X" + struct.pack("<I", len(raw)) + raw
        assert data.count(old) == 1, name
        data = data.replace(old, b"X" + struct.pack("<I", len(new.encode())) + new.encode())
        renamed += 1
    placeholder = f"trainpack-checkpoint 2 entries={len(entries)} crc32c=00000000".encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            zout.writestr(item, data if item.filename == pkl else zin.read(item.filename))
        zout.comment = placeholder
    raw = out.getvalue()
    assert raw.endswith(placeholder)
    body = raw[: -len(placeholder)]
    trailer = placeholder[:-8] + f"{crc32c(body):08x}".encode()
    with open(dst, "wb") as f:
        f.write(body + trailer)
    return renamed


def make_foreign(src, dst):
    """Writes to `dst` a valid checkpoint of "another model": `src` with every module entry (a
    name without '/') renamed to upper case."""
    renamed = _rename_entries(src, dst, lambda name: None if "/" in name else name.upper())
    assert renamed > 0


def make_missing(src, dst, entry):
    """Writes to `dst` a valid checkpoint that lacks the model entry `entry` (a parameter of the
    main job's model): `src` with that one entry renamed to a name the model does not have."""
    renamed = _rename_entries(src, dst, lambda name: "gone_" + name if name == entry else None)
    assert renamed == 1, entry


if __name__ == "__main__":
    for p in sys.argv[1:]:
        i = inspect(p)
        print(p, "valid" if i.valid else f"INVALID ({i.why})", i.counters,
              "finite" if i.finite else f"non-finite: {i.nonfinite}", "lr", i.learning_rate)
