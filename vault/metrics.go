package vault

import (
	"github.com/fdj/tresor/audit"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the vault's Prometheus series; tresor-vault-rules.yml in
// deploy/prometheus alerts on them (docs/vault.md lists them).
type Metrics struct {
	sourceSeq    prometheus.Gauge
	verifiedSeq  prometheus.Gauge
	lagEvents    prometheus.Gauge
	lagSeconds   prometheus.Gauge
	lastSealSeq  prometheus.Gauge
	unsealedSecs prometheus.Gauge
	sealOverdue  prometheus.Gauge
	sourceUp     prometheus.Gauge
	forks        prometheus.Gauge
	violations   *prometheus.GaugeVec
	sourceRead   prometheus.Counter
	copied       prometheus.Counter
	replayed     prometheus.Counter
	// codes are the codes ever published, set back to 0 when they are
	// no longer found.
	codes map[audit.Code]bool
}

// alwaysPublished are codes whose series exist from the start, so that an
// alert's expression reads 0 rather than nothing.
var alwaysPublished = []audit.Code{audit.CodeSequenceGap, audit.CodeHashMismatch, audit.CodeChainBroken,
	audit.CodeSealInvalid, audit.CodeSealMissing, CodeSourceUnreachable, CodeSealOverdue}

// NewMetrics registers the vault's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	g := func(name, help string) prometheus.Gauge {
		m := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		reg.MustRegister(m)
		return m
	}
	c := func(name, help string) prometheus.Counter {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(m)
		return m
	}
	violations := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tresor_vault_violations",
		Help: "Violations found in the copy and alarms in force, by code."}, []string{"code"})
	reg.MustRegister(violations)
	m := &Metrics{
		sourceSeq:    g("tresor_vault_source_seq", "The operator's stream's last sequence, as last seen."),
		verifiedSeq:  g("tresor_vault_verified_seq", "The last sequence the vault copied and verified."),
		lagEvents:    g("tresor_vault_lag_events", "Events of the operator's stream not verified yet."),
		lagSeconds:   g("tresor_vault_lag_seconds", "Seconds since the vault learned of the oldest event of the operator's stream it has not verified yet (0 when caught up)."),
		lastSealSeq:  g("tresor_vault_last_seal_seq", "The sequence of the last seal the vault verified."),
		unsealedSecs: g("tresor_vault_unsealed_seconds", "Seconds since the vault received the oldest event that no seal covers yet."),
		sealOverdue:  g("tresor_vault_seal_overdue", "1 when events no seal covers are older than the vault's --seal-overdue."),
		sourceUp:     g("tresor_vault_source_up", "1 when the operator's stream answered the vault's last probe."),
		forks:        g("tresor_vault_forks", "Positions where the operator's stream differs from the vault's copy."),
		violations:   violations,
		sourceRead:   c("tresor_vault_source_events_read_total", "Events this process read from the operator's stream."),
		copied:       c("tresor_vault_copied_events_total", "Events this process appended to the vault's copy."),
		replayed: c("tresor_vault_copy_replayed_events_total",
			"Events of the vault's own copy this process verified at its start (copied before a stop, not verified then)."),
		codes: map[audit.Code]bool{},
	}
	for _, code := range alwaysPublished {
		m.codes[code] = true
		violations.WithLabelValues(string(code)).Set(0)
	}
	return m
}

// publish sets the gauges from a status.
func (m *Metrics) publish(s *Status) {
	if m == nil {
		return
	}
	m.sourceSeq.Set(float64(s.SourceSeq))
	m.verifiedSeq.Set(float64(s.VerifiedSeq))
	m.lagEvents.Set(float64(s.LagEvents))
	m.lagSeconds.Set(s.LagSeconds)
	m.lastSealSeq.Set(float64(s.LastSealSeq))
	m.unsealedSecs.Set(s.unsealedSeconds)
	m.sealOverdue.Set(b01(s.overdue))
	m.sourceUp.Set(b01(s.sourceUp))
	m.forks.Set(float64(len(s.Forks)))
	for code := range s.counts {
		m.codes[code] = true
	}
	for code := range m.codes {
		m.violations.WithLabelValues(string(code)).Set(float64(s.counts[code]))
	}
}

func b01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
