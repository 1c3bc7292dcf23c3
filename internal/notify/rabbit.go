package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitOptions say where and how RabbitMQ notifications go
// ([oslo_messaging_notifications] transport_url, [notifications]
// versioned_notifications_topics; the exchange is Nova's control_exchange,
// nova).
type RabbitOptions struct {
	// URL is a transport_url: rabbit://user:pass@host:port/vhost (several
	// hosts comma-separated, as oslo.messaging's: tried in turn).
	URL string
	// Topics are the topics each notification goes to (default
	// versioned_notifications); the routing key is topic.priority.
	Topics []string
	// Exchange is the topic exchange (default nova).
	Exchange string
	// Timeout bounds connecting and each publish's confirm (default 10 s).
	Timeout time.Duration
}

// RabbitSink publishes as oslo.messaging's rabbit driver with the
// messagingv2 notification driver: the envelope in a JSON message on a
// non-durable topic exchange, routed by topic.priority, with the queue of
// that name declared and bound (as oslo's notifier does, so notifications
// wait for a consumer that is not up yet). Each publish waits for the
// broker's confirm; a failure drops the connection, and the next Send
// reconnects.
type RabbitSink struct {
	opt  RabbitOptions
	urls []string

	mu       sync.Mutex
	conn     *amqp.Connection
	ch       *amqp.Channel
	declared map[string]bool
	next     int
}

// ParseTransportURL turns oslo.messaging's rabbit://user:pass@h1:p1,user:pass@h2:p2/vhost
// into AMQP URLs, one per host.
func ParseTransportURL(raw string) ([]string, error) {
	rest, ok := strings.CutPrefix(raw, "rabbit://")
	if !ok {
		return nil, fmt.Errorf("transport_url %q: keel sends notifications to RabbitMQ only: want rabbit://user:password@host:5672/", raw)
	}
	hosts, vhost, _ := strings.Cut(rest, "/")
	if i := strings.IndexByte(vhost, '?'); i >= 0 {
		vhost = vhost[:i]
	}
	var out []string
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue
		}
		u, err := url.Parse("amqp://" + h + "/" + vhost)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("transport_url %q: host %q: want user:password@host:port", raw, h)
		}
		if u.Port() == "" {
			u.Host = net.JoinHostPort(u.Hostname(), "5672")
		}
		out = append(out, u.String())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("transport_url %q names no host", raw)
	}
	return out, nil
}

// NewRabbitSink checks opt; it connects at its first Send.
func NewRabbitSink(opt RabbitOptions) (*RabbitSink, error) {
	urls, err := ParseTransportURL(opt.URL)
	if err != nil {
		return nil, err
	}
	if len(opt.Topics) == 0 {
		opt.Topics = []string{"versioned_notifications"}
	}
	if opt.Exchange == "" {
		opt.Exchange = "nova"
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Second
	}
	return &RabbitSink{opt: opt, urls: urls}, nil
}

// Name implements Sink.
func (*RabbitSink) Name() string { return "rabbit" }

// Send implements Sink: to every topic, each confirmed.
func (s *RabbitSink) Send(ctx context.Context, m Message) error {
	body, err := envelope(m)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", m.EventType, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.connect(); err != nil {
		return err
	}
	for _, topic := range s.opt.Topics {
		key := topic + "." + strings.ToLower(m.Priority)
		if err := s.publish(ctx, key, body); err != nil {
			s.drop()
			return fmt.Errorf("publishing %s to %s: %w", m.EventType, key, err)
		}
	}
	return nil
}

func (s *RabbitSink) publish(ctx context.Context, key string, body []byte) error {
	if !s.declared[key] {
		// As oslo's notifier: the queue named after the routing key, so a
		// consumer that starts later finds what was sent before it.
		if _, err := s.ch.QueueDeclare(key, false, false, false, false, nil); err != nil {
			return fmt.Errorf("declaring queue: %w", err)
		}
		if err := s.ch.QueueBind(key, key, s.opt.Exchange, false, nil); err != nil {
			return fmt.Errorf("binding queue: %w", err)
		}
		s.declared[key] = true
	}
	ctx, cancel := context.WithTimeout(ctx, s.opt.Timeout)
	defer cancel()
	conf, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, s.opt.Exchange, key, false, false, amqp.Publishing{
		ContentType: "application/json", ContentEncoding: "utf-8", DeliveryMode: amqp.Transient, Body: body,
	})
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the broker refused it (nack)")
	}
	return nil
}

func (s *RabbitSink) connect() error {
	if s.ch != nil && !s.ch.IsClosed() {
		return nil
	}
	s.drop()
	u := s.urls[s.next%len(s.urls)]
	s.next++
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(s.opt.Timeout), Properties: amqp.Table{"connection_name": "keel-notifications"}})
	if err != nil {
		return fmt.Errorf("connecting to RabbitMQ at %s: %w", redact(u), err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err == nil {
		// oslo.messaging's notification exchange: a topic exchange,
		// durable only with amqp_durable_queues (default off).
		err = ch.ExchangeDeclare(s.opt.Exchange, "topic", false, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("setting up RabbitMQ at %s: %w", redact(u), err)
	}
	s.conn, s.ch, s.declared = conn, ch, map[string]bool{}
	return nil
}

func (s *RabbitSink) drop() {
	if s.conn != nil {
		s.conn.Close()
	}
	s.conn, s.ch = nil, nil
}

// Close implements Sink.
func (s *RabbitSink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop()
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(a bad URL)"
	}
	return p.Redacted()
}
