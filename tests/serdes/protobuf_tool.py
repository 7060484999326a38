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
import sys

from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

from serdes_common import consume, contexts, produce as produce_records, registry

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


def as_dict(message):
    return json_format.MessageToDict(message)


def produce(bootstrap, url, topic, first, count):
    sr = registry(url)
    conf = {"use.deprecated.format": False}
    keys, values = ProtobufSerializer(OrderKey, sr, conf), ProtobufSerializer(Order, sr, conf)
    key_ctx, value_ctx = contexts(topic)

    def records():
        for i in range(int(first), int(first) + int(count)):
            key = OrderKey(id=f"order-{i}")
            value = Order(id=f"order-{i}", note=f"note-{i}")
            value.amount.cents = i * 100
            value.amount.currency = "EUR"
            yield i % 3, as_dict(key), as_dict(value), keys(key, key_ctx), values(value, value_ctx)

    produce_records(bootstrap, topic, records())


def consume_group(bootstrap, _url, topic, group, reset, count):
    conf = {"use.deprecated.format": False}
    # Not given the registry: this client asks it for the writer's schema as a serialized
    # descriptor, which Apicurio cannot render from what the same client registered. The test
    # checks each id against the registries itself (`key_id`, `value_id`).
    keys, values = ProtobufDeserializer(OrderKey, conf), ProtobufDeserializer(Order, conf)
    key_ctx, value_ctx = contexts(topic)
    # Offsets the group has committed win over RESET; it commits exactly what it read.
    consume(bootstrap, topic, group, reset, count,
            lambda k, v: (as_dict(keys(k, key_ctx)), as_dict(values(v, value_ctx))), commit=True)


if __name__ == "__main__":
    {"produce": produce, "consume-group": consume_group}[sys.argv[1]](*sys.argv[2:])
