// The header-filter policy in JavaScript: the behaviour of plugins/header-filter (Rust).
//
// Drops every record that carries a given header, and masks the string value of one top-level
// JSON field. It implements only the record hook, so strait keeps its built-in naming.
//
// Keys, next to `replication.policy.wasm` in mm2.properties:
// - `replication.policy.header-filter.drop.header` (default `x-strait-drop`);
// - `replication.policy.header-filter.mask.field` (default none).

const NULL = 0xffffffff;
const DROP_HEADER = "replication.policy.header-filter.drop.header";
const MASK_FIELD = "replication.policy.header-filter.mask.field";
const utf8 = new TextEncoder();

const settings = { drop: utf8.encode("x-strait-drop"), mask: null };

function equal(data, at, length, wanted) {
  if (length !== wanted.length) return false;
  for (let i = 0; i < length; i++) if (data[at + i] !== wanted[i]) return false;
  return true;
}

/** Whether the packed headers region `[start, start + length)` has a header named `wanted`. */
function hasHeader(data, view, start, length, wanted) {
  let at = start;
  const end = start + length;
  while (at + 4 <= end) {
    const keyLength = view.getUint32(at, true);
    at += 4;
    const found = equal(data, at, keyLength, wanted);
    at += keyLength;
    const valueLength = view.getUint32(at, true);
    at += 4;
    if (found) return true;
    if (valueLength !== NULL) at += valueLength;
  }
  return false;
}

function find(haystack, needle, from) {
  outer: for (let i = from; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

const isSpace = (b) => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;

/** `value` with the string of `"field": "..."` replaced by `"***"`; null when absent. */
export function maskJsonStringField(value, field) {
  const needle = utf8.encode(`"${field}"`);
  const start = find(value, needle, 0);
  if (start < 0) return null;
  let i = start + needle.length;
  while (i < value.length && isSpace(value[i])) i++;
  if (value[i] !== 0x3a) return null; // ':'
  i++;
  while (i < value.length && isSpace(value[i])) i++;
  if (value[i] !== 0x22) return null; // '"'
  const valueStart = i;
  i++;
  while (i < value.length) {
    if (value[i] === 0x5c) i += 2; // backslash
    else if (value[i] === 0x22) break;
    else i++;
  }
  const tail = value.subarray(Math.min(i + 1, value.length));
  const stars = utf8.encode('"***"');
  const out = new Uint8Array(valueStart + stars.length + tail.length);
  out.set(value.subarray(0, valueStart), 0);
  out.set(stars, valueStart);
  out.set(tail, valueStart + stars.length);
  return out;
}

export const lifecycle = {
  init(sourceAlias, targetAlias, properties) {
    const given = new Map(properties.map((p) => [p.key, p.value]));
    const drop = given.get(DROP_HEADER) ?? "x-strait-drop";
    if (drop === "") throw `${DROP_HEADER} must not be empty`;
    settings.drop = utf8.encode(drop);
    const mask = given.get(MASK_FIELD) ?? "";
    settings.mask = mask === "" ? null : mask;
  },
  hooks() {
    return { records: true };
  },
};

export const records = {
  onBatch(batch) {
    const { index, data } = batch;
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    const drop = [];
    const edits = [];
    for (let i = 0; i < index.length / 8; i++) {
      const valueOffset = index[i * 8 + 3];
      const valueLength = index[i * 8 + 4];
      const headersOffset = index[i * 8 + 5];
      const headersLength = index[i * 8 + 6];
      if (hasHeader(data, view, headersOffset, headersLength, settings.drop)) {
        drop.push(i);
        continue;
      }
      if (settings.mask !== null && valueLength !== NULL) {
        const masked = maskJsonStringField(data.subarray(valueOffset, valueOffset + valueLength), settings.mask);
        if (masked !== null) {
          // option<option<T>>: the outer option is always a tagged object, even for none.
          const value = { tag: "some", val: masked };
          edits.push({ position: i, key: { tag: "none" }, value, headers: null, timestamp: null, topic: null });
        }
      }
    }
    return { drop: new Uint32Array(drop), edits };
  },
};

// Hooks not listed by `hooks()`: strait never calls them.
const never = () => {
  throw "not implemented: strait calls only the hooks `hooks()` lists";
};
export const naming = {
  formatRemoteTopic: never,
  topicSource: never,
  upstreamTopic: never,
  isInternalTopic: never,
  heartbeatsTopic: never,
  checkpointsTopic: never,
  offsetSyncsTopic: never,
};
export const filters = { topic: never, group: never, topicConfig: never };
export const conflicts = { resolve: never };
