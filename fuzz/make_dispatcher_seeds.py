#!/usr/bin/env python3
"""Writes the seed sessions of fuzz_dispatcher (fuzz/fuzz_dispatcher.cpp) into fuzz/corpus/fuzz_dispatcher:
sequences of requests a program makes (allocate, copy, streams and events, a captured graph), in the
fuzzer's input format, naming what the worker handed out by its marks. Run it again when calls.def moves."""
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = os.path.join(HERE, "..", "protocol", "include", "gpool", "protocol", "calls.def")
NAMES = [m.group(1) for m in re.finditer(r"^X\((\w+),", open(CALLS).read(), re.M)]
NAMES += ["MemcpyDtoH", "Alive", "Output"]  # (the control messages after the calls, as in the fuzzer's table)
NO_REPLY = 1
CUBIN = open(os.path.join(HERE, "corpus", "fuzz_module_image", "kernel_sm90.cubin"), "rb").read()


def mark(k):
    """The k-th value of the worker's replies, counted from the latest reply's first."""
    return b"\xab" * 7 + bytes([k])


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def frame(name, payload=b"", flags=0):
    return struct.pack("<HBH", NAMES.index(name), flags, len(payload)) + payload


SEEDS = {
    "memory": [
        frame("MemAlloc", u64(64)),                                   # -> ptr, bytes
        frame("MemcpyHtoD", mark(0) + u64(8) + b"12345678" + u64(0) + u32(0)),
        frame("Memset", mark(0) + u32(4) + u64(4) + u32(7) + u64(0) + u32(1), NO_REPLY),
        frame("MemcpyDtoH", mark(0) + u64(16) + u64(0)),              # -> two words of data
        frame("MemcpyDtoD", mark(2) + mark(2) + u64(16) + u64(0) + u32(0)),  # (onto itself)
        frame("MemFree", mark(2)),
        frame("MemGetInfo"),
    ],
    "streams": [
        frame("StreamCreate", u32(1) + u32(0)),                       # -> stream
        frame("EventCreate", u32(0)),                                 # -> event, stream
        frame("EventRecord", mark(0) + mark(1) + u32(0)),
        frame("StreamWaitEvent", mark(1) + mark(0) + u32(0)),
        frame("StreamSynchronize", mark(1)),
        frame("EventQuery", mark(0)),
        frame("EventElapsedTime", mark(0) + mark(0)),
        frame("EventDestroy", mark(0)),
        frame("StreamDestroy", mark(1)),
        frame("CtxSynchronize"),
    ],
    "graph": [
        frame("MemAlloc", u64(256)),                                  # -> ptr, bytes
        frame("StreamCreate", u32(1) + u32(0)),                       # -> stream, ptr, bytes
        frame("StreamBeginCapture", mark(0) + u32(0)),
        frame("Memset", mark(1) + u32(1) + u64(256) + u32(9) + mark(0) + u32(1)),
        frame("StreamEndCapture", mark(0)),                           # -> graph, stream, ptr
        frame("GraphNodeCount", mark(0)),                             # -> count, graph, stream, ptr
        frame("GraphInstantiate", mark(1) + u64(0)),                  # -> exec, count, graph, stream, ptr
        frame("GraphLaunch", mark(0) + mark(3)),
        frame("StreamSynchronize", mark(3)),
        frame("GraphExecDestroy", mark(0)),
        frame("GraphDestroy", mark(2)),
        frame("MemFree", mark(4)),
    ],
    "pools": [
        frame("StreamCreate", u32(1) + u32(0)),                       # -> stream
        frame("MemAllocAsync", u64(4096) + mark(0)),                  # -> ptr, bytes, stream
        frame("StreamWriteValue", mark(2) + mark(0) + u32(4) + u64(5) + u32(0)),
        frame("StreamWaitValue", mark(2) + mark(0) + u32(4) + u64(5) + u32(0)),
        frame("MemFreeAsync", mark(0) + mark(2)),
        frame("StreamSynchronize", mark(2)),
        frame("Alive"),
    ],
    # Virtual memory: a reservation, physical memory mapped in it, a copy through it, a second reservation
    # asked at the first's address (a hint, which the worker's backend follows only where it is free).
    "virtual_memory": [
        frame("MemGetGranularity", u32(0)),                            # -> granularity
        frame("MemAddressReserve", u64(4 << 20) + u64(0) + u64(0) + u64(0)),  # -> ptr, size, granularity
        frame("MemCreate", u64(2 << 20) + u32(0) + u32(0) + u32(0)),   # -> physical, ptr, size, granularity
        frame("MemMap", mark(1) + u64(2 << 20) + u64(0) + mark(0)),
        frame("MemSetAccess", mark(1) + u64(2 << 20) + u32(3)),
        frame("MemcpyHtoD", mark(1) + u64(8) + b"12345678" + u64(0) + u32(0)),
        frame("MemcpyDtoH", mark(1) + u64(16) + u64(0)),               # -> two words, physical, ptr, ...
        frame("MemAddressReserve", u64(2 << 20) + u64(0) + mark(3) + u64(0)),  # -> ptr2, size2, two words, physical, ptr
        frame("MemAddressFree", mark(0) + u64(2 << 20)),
        frame("MemUnmap", mark(5) + u64(2 << 20)),
        frame("MemRelease", mark(4)),
        frame("MemAddressFree", mark(5) + u64(4 << 20)),
    ],
    # A module (the cubin of fuzz_module_image's seeds: k(int*, float)), a kernel of it and its launch.
    "module": [
        frame("ModuleLoad", u64(len(CUBIN)) + CUBIN + u32(0)),         # -> module
        frame("ModuleGetFunction", mark(0) + u32(0) + u32(7) + b"_Z1kPif"),  # -> function, module
        frame("FuncGetParamLayout", mark(0)),                          # -> two words of layout, function, module
        frame("MemAlloc", u64(64)),                                    # -> ptr, bytes, two words, function, module
        frame("LaunchKernel", mark(4) + u32(1) * 6 + u32(0) + u64(0) + u64(12) + mark(0) + struct.pack("<f", 2.0) + u64(0)),
        frame("CtxSynchronize"),
        frame("ModuleUnload", mark(5) + u32(0)),
    ],
}

if __name__ == "__main__":
    out = os.path.join(HERE, "corpus", "fuzz_dispatcher")
    os.makedirs(out, exist_ok=True)
    for name, frames in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b"".join(frames))
    print(f"{len(SEEDS)} seeds in {out}")
