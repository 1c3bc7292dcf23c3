"""Decodes notifications as Nova 26 would: each line of stdin is one
message body as keel puts it on RabbitMQ (the messagingv2 envelope). For
each, the envelope, the event type (Nova's EventType), the publisher
(NotificationPublisher), the priority and the payload (obj_from_primitive
of Nova's own notification classes, at exactly the version Nova 26 has,
every field set) are checked. Prints "ok EVENT PAYLOAD VERSION" per
message, or "FAIL ..." and exits 1."""
import json
import re
import sys

from nova.notifications.objects import base as nbase  # noqa: F401
from nova.notifications.objects import exception, flavor, instance, keypair, service  # noqa: F401
from nova.objects import base as obase
from nova.objects import fields

obase.NovaObjectRegistry.register_notification_objects()

# obj_from_primitive makes an empty object (cls()) and sets each field
# from the primitive through the field's own type; the payload classes'
# constructors take the instance or service they describe instead, so
# decoding builds them empty. Every field is still checked by Nova's own
# field types.
for _cls in obase.NovaObjectRegistry.notification_classes:
    if issubclass(_cls, nbase.NotificationPayloadBase):
        _cls.__init__ = lambda self, *a, **kw: nbase.NotificationPayloadBase.__init__(self)


def every_field_set(obj, path):
    for name in obj.fields:
        if not obj.obj_attr_is_set(name):
            raise ValueError("%s.%s is not set" % (path, name))
        v = getattr(obj, name)
        if isinstance(v, obase.NovaObject):
            every_field_set(v, path + "." + name)
        elif isinstance(v, list):
            for i, item in enumerate(v):
                if isinstance(item, obase.NovaObject):
                    every_field_set(item, "%s.%s[%d]" % (path, name, i))


def no_extra_keys(prim, path):
    """obj_from_primitive ignores keys a class has no field for: refuse them."""
    cls = obase.NovaObjectRegistry.obj_classes()[prim["nova_object.name"]][0]
    extra = set(prim["nova_object.data"]) - set(cls.fields)
    if extra:
        raise ValueError("%s has no fields %s" % (path, sorted(extra)))
    for k, v in prim["nova_object.data"].items():
        for item in (v if isinstance(v, list) else [v]):
            if isinstance(item, dict) and "nova_object.name" in item:
                no_extra_keys(item, path + "." + k)


def check(line):
    body = json.loads(line)
    if set(body) != {"oslo.version", "oslo.message"} or body["oslo.version"] != "2.0":
        raise ValueError("not a messagingv2 envelope: %s" % sorted(body))
    msg = json.loads(body["oslo.message"])
    want = {"message_id", "publisher_id", "event_type", "priority", "payload", "timestamp"}
    if set(msg) != want:
        raise ValueError("message keys %s, want %s" % (sorted(msg), sorted(want)))
    # publisher_id is NotificationPublisher's "<source>:<host>".
    source, _, host = msg["publisher_id"].partition(":")
    fields.NotificationSource().coerce(None, "source", source)
    if not host:
        raise ValueError("publisher_id %r has no host" % msg["publisher_id"])
    # event_type is EventType's object.action[.phase].
    parts = msg["event_type"].split(".")
    if len(parts) not in (2, 3):
        raise ValueError("event_type %r" % msg["event_type"])
    fields.NotificationAction().coerce(None, "action", parts[1])
    if len(parts) == 3:
        fields.NotificationPhase().coerce(None, "phase", parts[2])
    fields.NotificationPriority().coerce(None, "priority", msg["priority"].lower())
    if msg["priority"] != msg["priority"].upper():
        raise ValueError("priority %r: oslo sends it upper case" % msg["priority"])
    if not re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$", msg["timestamp"]):
        raise ValueError("timestamp %r is not str(utcnow())" % msg["timestamp"])
    p = msg["payload"]
    name, version = p["nova_object.name"], p["nova_object.version"]
    cls = obase.NovaObjectRegistry.obj_classes()[name][0]
    if cls.VERSION != version:
        raise ValueError("%s version %s, Nova 26 has %s" % (name, version, cls.VERSION))
    no_extra_keys(p, name)
    obj = obase.NovaObject.obj_from_primitive(p)
    every_field_set(obj, name)
    return "ok %s %s %s" % (msg["event_type"], name, version)


failed = False
for line in sys.stdin:
    if not line.strip():
        continue
    try:
        print(check(line))
    except Exception as e:  # noqa: BLE001 - every failure is reported
        failed = True
        print("FAIL %s: %s: %s" % (line[:200].strip(), type(e).__name__, e))
sys.exit(1 if failed else 0)
