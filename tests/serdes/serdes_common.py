"""What the serializer tools share: the wire format's id, the registry client's settings, a
producer whose every record must be acknowledged, and a consumer loop."""
import json
import sys

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext


def schema_id(data):
    return int.from_bytes(data[1:5], "big") if data and data[0] == 0 else None


def registry(url):
    # A request that hangs is given up and sent again, instead of holding the test until it is
    # killed.
    return SchemaRegistryClient({"url": url, "timeout": 10, "max.retries": 5})


def emit(key, value, k, v):
    """One JSON line per record: the decoded key and value, and the ids their bytes carry."""
    print(json.dumps({"key": key, "value": value, "key_id": schema_id(k), "value_id": schema_id(v)}), flush=True)


def produce(bootstrap, topic, records):
    """Sends (partition, key, value, key bytes, value bytes) and exits non-zero unless every one
    was acknowledged."""
    # In order without idempotence: an idempotent producer needs the transaction coordinator,
    # which a restarted cluster with a long transaction log may still be loading.
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "max.in.flight.requests.per.connection": 1})
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    for partition, key, value, k, v in records:
        p.produce(topic, key=k, value=v, partition=partition, on_delivery=delivered)
        emit(key, value, k, v)
    if p.flush(120) != 0 or failed:
        sys.exit(f"records were not all acknowledged: {failed[:3]}")


def consume(bootstrap, topic, group, reset, count, decode, commit=False):
    """Reads `count` records as `group` (`read_committed`), `decode(key bytes, value bytes)`
    giving what `emit` prints; commits exactly what it read when `commit`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": reset,
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([topic])
    read, idle, next_offsets = 0, 0, {}
    while read < int(count) and idle < 240:
        m = c.poll(0.5)
        if m is None:
            idle += 1
            continue
        if m.error():
            sys.exit(f"consumer error: {m.error()}")
        key, value = decode(m.key(), m.value())
        emit(key, value, m.key(), m.value())
        next_offsets[m.partition()] = m.offset() + 1
        read += 1
    if commit and next_offsets:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in next_offsets.items()], asynchronous=False)
    c.close()
    if read < int(count):
        sys.exit(f"{group} read only {read} of {count} records of {topic}")


def contexts(topic):
    return SerializationContext(topic, MessageField.KEY), SerializationContext(topic, MessageField.VALUE)
