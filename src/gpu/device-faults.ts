// Errors that mean the device, not the request, is broken: after one of them a CUDA context is
// often unusable for good ("sticky" errors such as an illegal address), a lost WebGPU device never
// comes back, and an allocator out of memory fails every later batch of the same size. A worker
// that sees one stops serving and is restarted (Triton's ONNX Runtime backend stays READY and
// fails every later request instead).

const DEVICE_FAULT = new RegExp(
  [
    String.raw`\bCUDA (?:failure|error)\b`,
    String.raw`\bcudaError\w*`,
    String.raw`\bCUBLAS(?: failure|_STATUS_\w+)`,
    String.raw`\bCUDNN(?: failure|_STATUS_\w+)`,
    String.raw`out of memory`,
    String.raw`Failed to allocate memory`,
    String.raw`\bdevice (?:was |is |has been )?lost\b`,
    String.raw`DEVICE_LOST`,
  ].join('|'),
  'i',
);

/** True when a session.run error message says the device failed. */
export const isDeviceFault = (message: string): boolean => DEVICE_FAULT.test(message);
