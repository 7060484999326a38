"""The header-filter policy in Python: the behaviour of plugins/header-filter (Rust).

Drops every record that carries a given header, and masks the string value of one top-level
JSON field. It implements only the record hook, so strait keeps its built-in naming.

Keys, next to `replication.policy.wasm` in mm2.properties:
- `replication.policy.header-filter.drop.header` (default `x-strait-drop`);
- `replication.policy.header-filter.mask.field` (default none).
"""

import struct

from componentize_py_types import Err, Some
from wit_world import exports
from wit_world.imports.types import Edit, HookSet, Verdict

NULL = 0xFFFFFFFF
DROP_HEADER = "replication.policy.header-filter.drop.header"
MASK_FIELD = "replication.policy.header-filter.mask.field"

settings = {"drop": b"x-strait-drop", "mask": None}


def headers(data, start, length):
    """The header keys of one record's packed headers region."""
    at, end = start, start + length
    while at + 4 <= end:
        (key_len,) = struct.unpack_from("<I", data, at)
        at += 4
        key = data[at:at + key_len]
        at += key_len
        (value_len,) = struct.unpack_from("<I", data, at)
        at += 4
        if value_len != NULL:
            at += value_len
        yield key


def mask_json_string_field(value, field):
    """`value` with the string of `"field": "..."` replaced by `"***"`; None when absent."""
    needle = b'"' + field + b'"'
    start = value.find(needle)
    if start < 0:
        return None
    i = start + len(needle)
    while i < len(value) and value[i:i + 1].isspace():
        i += 1
    if value[i:i + 1] != b":":
        return None
    i += 1
    while i < len(value) and value[i:i + 1].isspace():
        i += 1
    if value[i:i + 1] != b'"':
        return None
    value_start = i
    i += 1
    while i < len(value):
        c = value[i:i + 1]
        if c == b"\\":
            i += 2
        elif c == b'"':
            break
        else:
            i += 1
    return value[:value_start] + b'"***"' + value[min(i + 1, len(value)):]


def decide(index, data, drop_header, mask_field):
    """(positions to drop, [(position, new value)]) for one batch."""
    drop, masked = [], []
    for i in range(len(index) // 8):
        _, _, _, v_off, v_len, h_off, h_len, _ = index[i * 8:i * 8 + 8]
        if any(k == drop_header for k in headers(data, h_off, h_len)):
            drop.append(i)
            continue
        if mask_field is not None and v_len != NULL:
            new = mask_json_string_field(data[v_off:v_off + v_len], mask_field)
            if new is not None:
                masked.append((i, new))
    return drop, masked


class Lifecycle(exports.Lifecycle):
    def init(self, source_alias, target_alias, properties):
        given = {p.key: p.value for p in properties}
        drop = given.get(DROP_HEADER, "x-strait-drop")
        if not drop:
            raise Err(DROP_HEADER + " must not be empty")
        settings["drop"] = drop.encode()
        mask = given.get(MASK_FIELD, "")
        settings["mask"] = mask.encode() if mask else None

    def hooks(self):
        return HookSet.RECORDS


class Records(exports.Records):
    def on_batch(self, records):
        drop, masked = decide(records.index, records.data, settings["drop"], settings["mask"])
        edits = [Edit(position, None, Some(value), None, None, None) for position, value in masked]
        return Verdict(drop, edits)


# Hooks not listed by `hooks()`: strait never calls them.
class Naming(exports.Naming):
    def format_remote_topic(self, source_alias, topic):
        raise NotImplementedError

    def topic_source(self, topic):
        raise NotImplementedError

    def upstream_topic(self, topic):
        raise NotImplementedError

    def is_internal_topic(self, topic):
        raise NotImplementedError

    def heartbeats_topic(self):
        raise NotImplementedError

    def checkpoints_topic(self, cluster_alias):
        raise NotImplementedError

    def offset_syncs_topic(self, cluster_alias):
        raise NotImplementedError


class Filters(exports.Filters):
    def topic(self, topic):
        raise NotImplementedError

    def group(self, group):
        raise NotImplementedError

    def topic_config(self, key):
        raise NotImplementedError


class Conflicts(exports.Conflicts):
    def resolve(self, arriving, known):
        raise NotImplementedError
