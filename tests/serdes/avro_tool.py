"""Real Confluent-format Avro serializers for strait's schema tests (confluent-kafka's own).

  produce BOOTSTRAP REGISTRY TOPIC VERSION FIRST COUNT [NAMESPACE]   (TOPIC has 3 partitions)
                                                         Avro key and value, schema version 1 or 2
                                                         (in NAMESPACE: schemas no registry holds yet)
  consume BOOTSTRAP REGISTRY TOPIC COUNT                 read COUNT records from the start, deserialized

Each prints one JSON line per record: {"key": ..., "value": ..., "key_id": n, "value_id": n}.
"""
import json
import sys

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

KEY = json.dumps({"type": "record", "name": "OrderKey", "namespace": "strait.test",
                  "fields": [{"name": "id", "type": "string"}]})
VALUES = {
    "1": json.dumps({"type": "record", "name": "Order", "namespace": "strait.test",
                     "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}]}),
    # Version 2 adds a field with a default: a compatible evolution.
    "2": json.dumps({"type": "record", "name": "Order", "namespace": "strait.test",
                     "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"},
                                {"name": "note", "type": "string", "default": ""}]}),
}


def schema_id(data):
    return int.from_bytes(data[1:5], "big") if data and data[0] == 0 else None


def produce(bootstrap, registry, topic, version, first, count, namespace="strait.test"):
    sr = SchemaRegistryClient({"url": registry})
    keys = AvroSerializer(sr, KEY.replace("strait.test", namespace))
    values = AvroSerializer(sr, VALUES[version].replace("strait.test", namespace))
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    for i in range(int(first), int(first) + int(count)):
        key = {"id": f"order-{i}"}
        value = {"id": f"order-{i}", "amount": i * 10}
        if version == "2":
            value["note"] = f"note-{i}"
        k = keys(key, SerializationContext(topic, MessageField.KEY))
        v = values(value, SerializationContext(topic, MessageField.VALUE))
        p.produce(topic, key=k, value=v, partition=i % 3, on_delivery=delivered)
        print(json.dumps({"key": key, "value": value, "key_id": schema_id(k), "value_id": schema_id(v)}))
    if p.flush(120) != 0 or failed:
        sys.exit(f"records were not all acknowledged: {failed[:3]}")


def consume(bootstrap, registry, topic, count):
    sr = SchemaRegistryClient({"url": registry})
    keys, values = AvroDeserializer(sr), AvroDeserializer(sr)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"avro-tool-{topic}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.subscribe([topic])
    read, idle = 0, 0
    while read < int(count) and idle < 240:
        m = c.poll(0.5)
        if m is None:
            idle += 1
            continue
        if m.error():
            sys.exit(f"consumer error: {m.error()}")
        key = keys(m.key(), SerializationContext(topic, MessageField.KEY))
        value = values(m.value(), SerializationContext(topic, MessageField.VALUE))
        print(json.dumps({"key": key, "value": value, "key_id": schema_id(m.key()), "value_id": schema_id(m.value())}))
        read += 1
    c.close()
    if read < int(count):
        sys.exit(f"read only {read} of {count} records of {topic}")


if __name__ == "__main__":
    {"produce": produce, "consume": consume}[sys.argv[1]](*sys.argv[2:])
