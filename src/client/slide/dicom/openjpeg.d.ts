// The part of @cornerstonejs/codec-openjpeg's decoder (an Emscripten module, shipped untyped) that
// frames.ts uses.
declare module '@cornerstonejs/codec-openjpeg/decodewasmjs' {
  export interface J2KDecoder {
    getEncodedBuffer(length: number): Uint8Array;
    decode(): void;
    getDecodedBuffer(): Uint8Array;
    getFrameInfo(): { width: number; height: number; bitsPerSample: number; componentCount: number };
    /** OpenJPEG's OPJ_COLOR_SPACE of the decoded image (1: sRGB, 0: unknown). */
    getColorSpace(): number;
  }
  /** Emscripten's module factory; print and printErr take what OpenJPEG would write to stdout. */
  export default function factory(module?: {
    print?: (s: string) => void;
    printErr?: (s: string) => void;
  }): Promise<{ J2KDecoder: new () => J2KDecoder }>;
}
