"""Real Confluent-format Protobuf serializers for strait's schema tests (confluent-kafka's own).

  produce BOOTSTRAP REGISTRY TOPIC FIRST COUNT           Protobuf key and value (the value's
                                                         schema imports another file: a reference)
  consume-group BOOTSTRAP REGISTRY TOPIC GROUP RESET COUNT
                                                         read COUNT records as GROUP from its
                                                         committed offsets (else RESET: earliest or
                                                         latest), commit exactly those

Each prints one JSON line per record: {"key": ..., "value": ..., "key_id": n, "value_id": n}.
The message classes are built at run time from descriptors, as protoc would generate them.
"""
import json
import sys

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

F = descriptor_pb2.FieldDescriptorProto


def _file(name, messages, deps=()):
    f = descriptor_pb2.FileDescriptorProto(name=name, package="strait.test", syntax="proto3")
    f.dependency.extend(deps)
    for message, fields in messages:
        m = f.message_type.add(name=message)
        for number, (field, kind, type_name) in enumerate(fields, start=1):
            f_ = m.field.add(name=field, number=number, type=kind, label=F.LABEL_OPTIONAL)
            if type_name:
                f_.type_name = type_name
    return f


POOL = descriptor_pool.Default()
POOL.AddSerializedFile(_file("strait/money.proto", [("Money", [("cents", F.TYPE_INT64, ""),
                                                                ("currency", F.TYPE_STRING, "")])]).SerializeToString())
# The value is the file's second message: its message indexes are [1], not the short form.
POOL.AddSerializedFile(_file("strait/order.proto", [
    ("OrderKey", [("id", F.TYPE_STRING, "")]),
    ("Order", [("id", F.TYPE_STRING, ""), ("amount", F.TYPE_MESSAGE, ".strait.test.Money"), ("note", F.TYPE_STRING, "")]),
], deps=["strait/money.proto"]).SerializeToString())
OrderKey = message_factory.GetMessageClass(POOL.FindMessageTypeByName("strait.test.OrderKey"))
Order = message_factory.GetMessageClass(POOL.FindMessageTypeByName("strait.test.Order"))


def schema_id(data):
    return int.from_bytes(data[1:5], "big") if data and data[0] == 0 else None


def line(key, value, k, v):
    return json.dumps({"key": json_format.MessageToDict(key), "value": json_format.MessageToDict(value),
                       "key_id": schema_id(k), "value_id": schema_id(v)})


def produce(bootstrap, registry, topic, first, count):
    sr = SchemaRegistryClient({"url": registry})
    conf = {"use.deprecated.format": False}
    keys, values = ProtobufSerializer(OrderKey, sr, conf), ProtobufSerializer(Order, sr, conf)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    for i in range(int(first), int(first) + int(count)):
        key = OrderKey(id=f"order-{i}")
        value = Order(id=f"order-{i}", note=f"note-{i}")
        value.amount.cents = i * 100
        value.amount.currency = "EUR"
        k = keys(key, SerializationContext(topic, MessageField.KEY))
        v = values(value, SerializationContext(topic, MessageField.VALUE))
        p.produce(topic, key=k, value=v, partition=i % 3, on_delivery=delivered)
        print(line(key, value, k, v))
    if p.flush(120) != 0 or failed:
        sys.exit(f"records were not all acknowledged: {failed[:3]}")


def consume_group(bootstrap, _registry, topic, group, reset, count):
    conf = {"use.deprecated.format": False}
    # Not given the registry: this client asks it for the writer's schema as a serialized
    # descriptor, which Apicurio cannot render from what the same client registered. The test
    # checks each id against the registries itself (`key_id`, `value_id`).
    keys, values = ProtobufDeserializer(OrderKey, conf), ProtobufDeserializer(Order, conf)
    # Offsets the group has committed win over RESET.
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
        key = keys(m.key(), SerializationContext(topic, MessageField.KEY))
        value = values(m.value(), SerializationContext(topic, MessageField.VALUE))
        print(line(key, value, m.key(), m.value()))
        next_offsets[m.partition()] = m.offset() + 1
        read += 1
    if next_offsets:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in next_offsets.items()], asynchronous=False)
    c.close()
    if read < int(count):
        sys.exit(f"{group} read only {read} of {count} records of {topic}")


if __name__ == "__main__":
    {"produce": produce, "consume-group": consume_group}[sys.argv[1]](*sys.argv[2:])
