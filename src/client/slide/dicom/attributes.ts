// A DICOM data set's attributes as the WSI reader asks for them, whichever way it arrived: a
// Part 10 file parsed by dicom-parser (values read by their VR), or a DICOMweb server's
// application/dicom+json (PS3.18 F.2: values already typed). Tags are 8 hex digits, "00480006".
import type { DataSet, Element } from 'dicom-parser';

export interface Attrs {
  /** The string value at `index` (a multi-valued CS or DS split on backslashes). */
  text(tag: string, index?: number): string | undefined;
  /** The number at `index`, whatever the VR (US, UL, SL, FL, FD, DS, IS). */
  number(tag: string, index?: number): number | undefined;
  /** How many values the attribute has. */
  count(tag: string): number;
  /** A sequence's items. */
  items(tag: string): Attrs[];
}

/** Binary VRs: bytes a value, and how dicom-parser reads value `i`. */
const BINARY: Record<string, [number, (data: DataSet, tag: string, i: number) => number | undefined]> = {
  US: [2, (d, t, i) => d.uint16(t, i)],
  SS: [2, (d, t, i) => d.int16(t, i)],
  UL: [4, (d, t, i) => d.uint32(t, i)],
  SL: [4, (d, t, i) => d.int32(t, i)],
  FL: [4, (d, t, i) => d.float(t, i)],
  FD: [8, (d, t, i) => d.double(t, i)],
};

export function fileAttrs(data: DataSet): Attrs {
  const key = (tag: string) => `x${tag.toLowerCase()}`;
  const element = (tag: string): Element | undefined => data.elements[key(tag)];
  return {
    text: (tag, index = 0) => (element(tag) ? data.string(key(tag), index) : undefined),
    number(tag, index = 0) {
      const e = element(tag);
      if (!e) return undefined;
      const binary = BINARY[e.vr ?? ''];
      if (binary) return (index + 1) * binary[0] <= e.length ? binary[1](data, key(tag), index) : undefined;
      const value = data.string(key(tag), index);
      return value === undefined || value === '' ? undefined : Number(value);
    },
    count(tag) {
      const e = element(tag);
      if (!e) return 0;
      const binary = BINARY[e.vr ?? ''];
      return binary ? e.length / binary[0] : (data.numStringValues(key(tag)) ?? 0);
    },
    items: (tag) => (element(tag)?.items ?? []).map((item) => fileAttrs(item.dataSet!)),
  };
}

/** One data set of the DICOM JSON model. */
export type JsonDataSet = Record<string, { vr: string; Value?: unknown[]; BulkDataURI?: string }>;

export function jsonAttrs(data: JsonDataSet): Attrs {
  // A server's JSON is not trusted to be the model's shape: what is not an array has no values.
  const values = (tag: string): unknown[] => {
    const v = data[tag.toUpperCase()]?.Value;
    return Array.isArray(v) ? v : [];
  };
  return {
    text: (tag, index = 0) => {
      const v = values(tag)[index];
      return v === undefined || v === null ? undefined : String(v);
    },
    number: (tag, index = 0) => {
      const v = values(tag)[index];
      return v === undefined || v === null ? undefined : Number(v);
    },
    count: (tag) => values(tag).length,
    items: (tag) => values(tag).map((item) => jsonAttrs((item ?? {}) as JsonDataSet)),
  };
}
