"""Real Confluent-format Avro serializers for strait's schema tests (confluent-kafka's own).

  produce BOOTSTRAP REGISTRY TOPIC VERSION FIRST COUNT [NAMESPACE]   (TOPIC has 3 partitions)
                                                         Avro key and value, schema version 1 or 2
                                                         (in NAMESPACE: schemas no registry holds yet)
  consume BOOTSTRAP REGISTRY TOPIC COUNT                 read COUNT records from the start, deserialized

Each prints one JSON line per record: {"key": ..., "value": ..., "key_id": n, "value_id": n}.
"""
import json
import sys

from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

from serdes_common import consume as consume_records, contexts, produce as produce_records, registry

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


def produce(bootstrap, url, topic, version, first, count, namespace="strait.test"):
    sr = registry(url)
    keys = AvroSerializer(sr, KEY.replace("strait.test", namespace))
    values = AvroSerializer(sr, VALUES[version].replace("strait.test", namespace))
    key_ctx, value_ctx = contexts(topic)

    def records():
        for i in range(int(first), int(first) + int(count)):
            key = {"id": f"order-{i}"}
            value = {"id": f"order-{i}", "amount": i * 10}
            if version == "2":
                value["note"] = f"note-{i}"
            yield i % 3, key, value, keys(key, key_ctx), values(value, value_ctx)

    produce_records(bootstrap, topic, records())


def consume(bootstrap, url, topic, count):
    sr = registry(url)
    keys, values = AvroDeserializer(sr), AvroDeserializer(sr)
    key_ctx, value_ctx = contexts(topic)
    consume_records(bootstrap, topic, f"avro-tool-{topic}", "earliest", count,
                    lambda k, v: (keys(k, key_ctx), values(v, value_ctx)))


if __name__ == "__main__":
    {"produce": produce, "consume": consume}[sys.argv[1]](*sys.argv[2:])
