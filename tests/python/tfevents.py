"""An independent reader of TensorBoard event files for the tests: the
TFRecord framing checked with a CRC32C written here (not librtrain's), the
records decoded with a protobuf wire-format decoder written here (not the
writer's proto/tfevents.proto), by the field numbers of TensorBoard's Event
and Summary:

    Event:         wall_time = 1 (double), step = 2 (int64),
                   oneof what { file_version = 3 (string), summary = 5 }
    Summary:       repeated Value value = 1
    Summary.Value: tag = 1 (string), oneof value { simple_value = 2 (float) }

It is strict: a field rtrain does not write, a wire type other than the
field's, a singular field twice or a truncated buffer fails the read."""
import glob
import os
import struct


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(c):
    # TFRecord's mask: rotate right by 15, add a constant (mod 2**32)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---- protobuf wire format

VARINT, I64, LEN, I32 = 0, 1, 2, 5


def varint(buf, i):
    """(value, next index) of the base-128 varint at buf[i]: 7 bits a byte,
    least significant first, the high bit set on all but the last byte."""
    v = 0
    for k in range(10):
        assert i < len(buf), "truncated varint"
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << (7 * k)
        if not b & 0x80:
            assert v < 1 << 64, "varint over 64 bits"
            return v, i
    raise AssertionError("varint longer than 10 bytes")


def fields(buf):
    """[(field number, wire type, value)] of one message: an int for
    VARINT, the raw bytes for I64 (8), I32 (4) and LEN fields."""
    out = []
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        assert num >= 1, "field number 0"
        if wt == VARINT:
            v, i = varint(buf, i)
        elif wt in (I64, I32):
            n = 8 if wt == I64 else 4
            assert i + n <= len(buf), "truncated fixed field %d" % num
            v, i = bytes(buf[i:i + n]), i + n
        elif wt == LEN:
            n, i = varint(buf, i)
            assert i + n <= len(buf), "truncated field %d" % num
            v, i = bytes(buf[i:i + n]), i + n
        else:
            raise AssertionError("wire type %d (field %d)" % (wt, num))
        out.append((num, wt, v))
    return out


def _int64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def singular_fields(buf, msg, types):
    """fields(buf) of a message whose fields are all singular: each field
    number must be one of types ({number: wire type}), with that wire type,
    and come at most once."""
    out = fields(buf)
    seen = set()
    for num, wt, _ in out:
        assert num in types, "%s field %d is not one rtrain writes" % (msg, num)
        assert wt == types[num], "%s field %d: wire type %d" % (msg, num, wt)
        assert num not in seen, "%s field %d twice" % (msg, num)
        seen.add(num)
    return out


class Value:
    """Summary.Value: tag, and which of its oneof value is set."""

    def __init__(self, buf):
        self.tag = ""
        self.what = None          # "simple_value" or None
        self.simple_value = 0.0
        for num, _, v in singular_fields(buf, "Value", {1: LEN, 2: I32}):
            if num == 1:
                self.tag = v.decode("utf-8")
            else:
                (self.simple_value,) = struct.unpack("<f", v)
                self.what = "simple_value"


class Event:
    """Event: wall_time, step, and which of its oneof what is set
    (file_version, or summary: the list of its Values)."""

    def __init__(self, buf):
        self.wall_time = 0.0
        self.step = 0
        self.what = None          # "file_version", "summary" or None
        self.file_version = ""
        self.summary = []
        types = {1: I64, 2: VARINT, 3: LEN, 5: LEN}
        for num, _, v in singular_fields(buf, "Event", types):
            if num == 1:
                (self.wall_time,) = struct.unpack("<d", v)
            elif num == 2:
                self.step = _int64(v)
            else:
                assert self.what is None, "Event has two of its oneof what"
                if num == 3:
                    self.what = "file_version"
                    self.file_version = v.decode("utf-8")
                else:
                    self.what = "summary"
                    self.summary = summary_values(v)


def summary_values(buf):
    out = []
    for num, wt, v in fields(buf):
        assert num == 1 and wt == LEN, "Summary field %d wire type %d" % (num, wt)
        out.append(Value(v))
    return out


# ---- TFRecord framing


def records(path):
    """The records of one TFRecord file, each frame's CRCs checked."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        assert len(data) - i >= 12, "truncated frame header"
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert hc == masked(crc32c(head)), "length CRC"
        body = data[i + 12:i + 12 + n]
        assert len(body) == n, "truncated record"
        assert len(data) - (i + 12 + n) >= 4, "truncated data CRC"
        (dc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        assert dc == masked(crc32c(body)), "data CRC"
        out.append(body)
        i += 16 + n
    return out


def read_run(run_dir):
    """(file name, [Event]) of the one event file in run_dir."""
    files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    assert len(files) == 1, files
    return os.path.basename(files[0]), [Event(r) for r in records(files[0])]


def scalars(evs):
    """{tag: [(step, value)]} of the simple_value summaries."""
    out = {}
    for e in evs:
        if e.what != "summary":
            continue
        for v in e.summary:
            assert v.what == "simple_value", v.tag
            out.setdefault(v.tag, []).append((e.step, v.simple_value))
    return out
