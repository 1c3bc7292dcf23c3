package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"keel/internal/bus"
	"keel/internal/clock"
	"keel/internal/notify"
)

// startNotifications starts the notifier — keel's bus always, RabbitMQ
// when [oslo_messaging_notifications] driver is messagingv2 — and wraps
// the store so that committed record changes are notified (package
// notify).
func (s *Server) startNotifications() error {
	cfg := s.cfg
	sinks := []notify.Sink{notify.BusSink{Bus: s.conn, Subject: bus.NotificationSubject}}
	if url := cfg.RabbitURL(); url != "" {
		rs, err := notify.NewRabbitSink(notify.RabbitOptions{URL: url, Topics: cfg.Notifications.Topics})
		if err != nil {
			return fmt.Errorf("[oslo_messaging_notifications] transport_url: %w", err)
		}
		sinks = append(sinks, rs)
		s.log.Info("sending Nova's versioned notifications to RabbitMQ", "exchange", "nova", "topics", cfg.Notifications.Topics)
	} else if cfg.Notifications.Driver == "messagingv2" {
		s.log.Warn("[oslo_messaging_notifications] driver is messagingv2 but no transport_url is set (or notification_format is unversioned): notifications go to keel's bus only")
	}
	s.notifier = notify.New(s.log, notify.DefaultQueueSize, sinks...)
	s.store = notify.Wrap(s.store, s.notifier, clock.Real{}.Now, cfg.Default.Host)
	return nil
}

// notificationCollector exports the notifier's counts per sink.
type notificationCollector struct{ n *notify.Notifier }

var (
	notifSent = prometheus.NewDesc("keel_notifications_sent_total",
		"Notifications a sink took (bus: keel.notify.*; rabbit: confirmed by RabbitMQ).", []string{"sink"}, nil)
	notifDropped = prometheus.NewDesc("keel_notifications_dropped_total",
		"Notifications dropped because the sink's queue was full (the sink down or slow for too long).", []string{"sink"}, nil)
	notifRetries = prometheus.NewDesc("keel_notifications_retries_total",
		"Sends that failed and were tried again.", []string{"sink"}, nil)
	notifQueued = prometheus.NewDesc("keel_notifications_queued",
		"Notifications waiting for the sink.", []string{"sink"}, nil)
)

func (c notificationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- notifSent
	ch <- notifDropped
	ch <- notifRetries
	ch <- notifQueued
}

func (c notificationCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.n.Counts() {
		ch <- prometheus.MustNewConstMetric(notifSent, prometheus.CounterValue, float64(k.Sent), k.Sink)
		ch <- prometheus.MustNewConstMetric(notifDropped, prometheus.CounterValue, float64(k.Dropped), k.Sink)
		ch <- prometheus.MustNewConstMetric(notifRetries, prometheus.CounterValue, float64(k.Retries), k.Sink)
		ch <- prometheus.MustNewConstMetric(notifQueued, prometheus.GaugeValue, float64(k.Queued), k.Sink)
	}
}
