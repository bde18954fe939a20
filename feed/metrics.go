package feed

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are a feed's Prometheus metrics, labelled by feed name. A nil
// *Metrics records nothing.
type Metrics struct {
	position, head, lag *prometheus.GaugeVec
	messages, errors    *prometheus.CounterVec
	publish             *prometheus.HistogramVec
}

// NewMetrics registers the feed metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		position: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tresor_feed_position",
			Help: "Stream sequence up to which the feed's messages are confirmed (its checkpoint)."}, []string{"feed"}),
		head: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tresor_feed_head",
			Help: "Last sequence of the stream, polled every second."}, []string{"feed"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tresor_feed_lag_events",
			Help: "Events of the stream not yet confirmed by the target (head minus position)."}, []string{"feed"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tresor_feed_messages_total",
			Help: "Messages confirmed by the target, by kind (rate() gives messages/s)."}, []string{"feed", "kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tresor_feed_errors_total",
			Help: "Failed publish attempts: unreachable (retried) or refused (retried, then poison)."}, []string{"feed", "reason"}),
		publish: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tresor_feed_publish_seconds",
			Help:    "Time of one confirmed publish (a batch and its checkpoint).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"feed"}),
	}
	reg.MustRegister(m.position, m.head, m.lag, m.messages, m.errors, m.publish)
	return m
}

// at records the feed's position and the stream's head.
func (m *Metrics) at(feed string, position, head uint64) {
	if m == nil {
		return
	}
	m.position.WithLabelValues(feed).Set(float64(position)) // float-ok: a gauge
	m.head.WithLabelValues(feed).Set(float64(head))         // float-ok: a gauge
	m.lag.WithLabelValues(feed).Set(float64(head - min(head, position)))
}

// published records a confirmed batch.
func (m *Metrics) published(feed string, b batch, took time.Duration) {
	if m == nil {
		return
	}
	var postings, plays float64 // float-ok: counters
	for _, msg := range b.msgs {
		if msg.Kind == KindPostings {
			postings++
		} else {
			plays++
		}
	}
	m.messages.WithLabelValues(feed, string(KindPostings)).Add(postings)
	m.messages.WithLabelValues(feed, string(KindPlaySettled)).Add(plays)
	m.publish.WithLabelValues(feed).Observe(took.Seconds())
}

// failed records a failed publish attempt.
func (m *Metrics) failed(feed, reason string) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(feed, reason).Inc()
}

// Position returns the feed's position as last recorded (0 when none):
// what a benchmark samples.
func (m *Metrics) Position(feed string) uint64 {
	var d dto.Metric
	if m == nil || m.position.WithLabelValues(feed).Write(&d) != nil {
		return 0
	}
	return uint64(d.GetGauge().GetValue())
}
