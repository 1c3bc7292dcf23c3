// Package notify publishes Nova's versioned notifications about what keel
// commits, so any consumer written for Nova (OpenStack Watcher, a billing
// collector, a dashboard) follows keel.
//
// Where events come from: keel's records. Store wraps the server's store;
// after a write of an instance, migration or service record commits, it
// compares the record before and after (Diff, pure) and emits what the
// change means in Nova's terms: a task state entered or left is an
// action's start or end, a migration's status or phase entered is a step
// of its flow, a service disabled is service.update, a service deleted
// (DeleteService) service.delete, and so on. No flow
// and no handler calls the notifier: a new flow is covered as soon as it
// writes its records, and an event never describes state that did not
// commit. Writes of one instance (its record and its migrations' records)
// are serialised in the wrapper, so its events are emitted in commit
// order.
//
// Where events go: a Notifier hands each event to its sinks, each with a
// bounded queue and a goroutine of its own: keel's bus
// (keel.notify.<event_type>) and, when [oslo_messaging_notifications]
// driver is messagingv2, RabbitMQ as oslo.messaging's messagingv2 driver
// sends (AMQP 0-9-1: exchange nova, topic versioned_notifications.<priority>,
// the {"oslo.version": "2.0", "oslo.message": …} envelope). A sink that is
// down or slow never blocks a write: the event waits in its queue, is sent
// again until the broker confirms it (at least once, in order), and when
// the queue is full the event is dropped, counted and logged.
//
// Payloads are Nova 26's notification objects (nova_object.name,
// .namespace, .version, .data): InstanceActionPayload 1.8,
// InstanceCreatePayload 1.12, InstanceUpdatePayload 2.0,
// InstanceActionResizePrepPayload 1.3, InstanceActionRescuePayload 1.3,
// InstanceActionRebuildPayload 1.9, InstanceActionSnapshotPayload 1.9,
// ServiceStatusPayload 1.1 and
// ExceptionPayload 1.1, with FlavorPayload 1.4 and KeypairPayload 1.0
// inside; tests decode every one with Nova's own classes.
package notify
