"""MirrorMaker 2's DefaultReplicationPolicy in Python: the behaviour of plugins/default (Rust).

Remote topics are named `<source alias><separator><topic>`; internal topics, heartbeats,
checkpoints and offset syncs are named as MM2 names them. One key, as MM2's:
`replication.policy.separator` (default `.`).
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.types import HookSet

settings = {"sep": "."}


def sep():
    return settings["sep"]


class Lifecycle(exports.Lifecycle):
    def init(self, source_alias, target_alias, properties):
        given = {p.key: p.value for p in properties}
        separator = given.get("replication.policy.separator", ".")
        if not separator:
            raise Err("replication.policy.separator must not be empty")
        settings["sep"] = separator

    def hooks(self):
        return HookSet.NAMING


class Naming(exports.Naming):
    def format_remote_topic(self, source_alias, topic):
        return source_alias + sep() + topic

    def topic_source(self, topic):
        # As Java's split: trailing empty tokens do not count.
        parts = topic.split(sep())
        if len(parts) < 2 or not any(parts[1:]):
            return None
        return parts[0]

    def upstream_topic(self, topic):
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(sep()):]

    def is_internal_topic(self, topic):
        mm2 = (topic.startswith("mm2") and topic.endswith("internal")) or topic.endswith(
            sep() + "checkpoints.internal"
        )
        return (
            mm2
            or topic.startswith("__")
            or topic.startswith(".")
            or topic.endswith("-internal")
            or topic.endswith(".internal")
        )

    def heartbeats_topic(self):
        return "heartbeats"

    def checkpoints_topic(self, cluster_alias):
        return cluster_alias + sep() + "checkpoints.internal"

    def offset_syncs_topic(self, cluster_alias):
        return "mm2-offset-syncs" + sep() + cluster_alias + sep() + "internal"


# Hooks not listed by `hooks()`: strait never calls them.
class Filters(exports.Filters):
    def topic(self, topic):
        raise NotImplementedError

    def group(self, group):
        raise NotImplementedError

    def topic_config(self, key):
        raise NotImplementedError


class Records(exports.Records):
    def on_batch(self, records):
        raise NotImplementedError


class Conflicts(exports.Conflicts):
    def resolve(self, arriving, known):
        raise NotImplementedError
