// MirrorMaker 2's DefaultReplicationPolicy in JavaScript: the behaviour of plugins/default (Rust).
//
// Remote topics are named `<source alias><separator><topic>`; internal topics, heartbeats,
// checkpoints and offset syncs are named as MM2 names them. One key, as MM2's:
// `replication.policy.separator` (default `.`).

let sep = ".";

export const lifecycle = {
  init(sourceAlias, targetAlias, properties) {
    const given = properties.find((p) => p.key === "replication.policy.separator");
    const separator = given ? given.value : ".";
    if (separator === "") throw "replication.policy.separator must not be empty";
    sep = separator;
  },
  hooks() {
    return { naming: true };
  },
};

function topicSource(topic) {
  // As Java's split: trailing empty tokens do not count.
  const parts = topic.split(sep);
  if (parts.length < 2 || !parts.slice(1).some((p) => p !== "")) return undefined;
  return parts[0];
}

export const naming = {
  formatRemoteTopic(sourceAlias, topic) {
    return sourceAlias + sep + topic;
  },
  topicSource,
  upstreamTopic(topic) {
    const source = topicSource(topic);
    return source === undefined ? undefined : topic.slice(source.length + sep.length);
  },
  isInternalTopic(topic) {
    const mm2 = (topic.startsWith("mm2") && topic.endsWith("internal")) || topic.endsWith(sep + "checkpoints.internal");
    return (
      mm2 ||
      topic.startsWith("__") ||
      topic.startsWith(".") ||
      topic.endsWith("-internal") ||
      topic.endsWith(".internal")
    );
  },
  heartbeatsTopic() {
    return "heartbeats";
  },
  checkpointsTopic(clusterAlias) {
    return clusterAlias + sep + "checkpoints.internal";
  },
  offsetSyncsTopic(clusterAlias) {
    return "mm2-offset-syncs" + sep + clusterAlias + sep + "internal";
  },
};

// Hooks not listed by `hooks()`: strait never calls them.
const never = () => {
  throw "not implemented: strait calls only the hooks `hooks()` lists";
};
export const filters = { topic: never, group: never, topicConfig: never };
export const records = { onBatch: never };
export const conflicts = { resolve: never };
