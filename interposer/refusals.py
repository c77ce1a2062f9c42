"""Why gpool refuses the driver functions it does not implement, by name (first match wins). One table
feeds both ends: gen_driver_table.py puts each reason into the client library's stub, which logs it the
first time a program calls the function, and scripts/compatibility.py prints it in docs/compatibility.md.
"""
import re

REFUSED = [
    (r"^cu(GL|EGL|VDPAU|Graphics|D3D|WGL)", "graphics interoperability: the GPU is on another machine, with no display"),
    (r"^cu(Array|Mipmapped|Tex|Surf)|Array|TexRef|SurfRef|^cuMemcpy(AtoA|AtoD|AtoH|DtoA|HtoA)", "texture and surface references, sparse arrays and array memory requirements are not forwarded (arrays, mipmapped arrays, texture and surface objects are)"),
    (r"^cuGraph.*ExternalSemaphores", "external semaphores (Vulkan/D3D) are not supported"),
    (r"^cuExternal|^cuImportExternal|^cuDestroyExternal|^cuSignalExternal|^cuWaitExternal", "external memory and semaphores (Vulkan/D3D) are not supported"),
    (r"^cuProfiler|^cuCheckpoint|^cuCoredump", "tools interfaces (profiler, checkpoint, coredump) are not forwarded"),
    (r"^cuMulticast", "multicast objects span GPUs that reach each other's memory; a lease's devices are separate workers that do not"),
    (r"AsyncNotification$", "memory budget notifications: a lease's memory cap refuses an allocation past it (CUDA_ERROR_OUT_OF_MEMORY) rather than let a process go over budget, so there is nothing to notify"),
    (r"^cuDeviceGetLuid$", "a Windows (WDDM) adapter's id, which CUDA gives only on Windows"),
    (r"NvSci", "NvSci (NVIDIA DRIVE and Jetson) interoperability: the GPU is on another machine"),
    (r"^cuMemGetHandleForAddressRange$", "a dma-buf of device memory is a descriptor on the GPU host, which neither the program's process nor its network card can use"),
    (r"^cuLaunchCooperativeKernelMultiDevice$", "a cooperative launch across devices needs them to reach each other; a lease's devices are separate workers (and CUDA deprecated it)"),
    (r"^cuMemBatchDecompressAsync$|^cuTensorMapEncodeIm2colWide$", "a Blackwell feature (hardware decompression, wide im2col tensor maps) not forwarded yet"),
    (r"^cuDeviceGetP2P|^cuCtxEnablePeer|^cuCtxDisablePeer|^cuDeviceCanAccessPeer", "a lease's devices are separate workers: no peer access between them (docs/user.md, \"Several GPUs\")"),
]


def reason(name):
    for pattern, why in REFUSED:
        if re.search(pattern, name):
            return why
    return "not forwarded yet"
