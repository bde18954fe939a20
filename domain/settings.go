package domain

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// defaultSettings is the jurisdiction file Tresor runs with unless told
// otherwise: France, with the behaviour Tresor had before settings existed.
//
//go:embed jurisdictions/fr-1.json
var defaultSettings []byte

// ErrSettings is wrapped by every error that refuses a jurisdiction's
// settings.
var ErrSettings = errors.New("settings refused")

// Bounds of the settings a jurisdiction file may give. They bound the
// state the ledger keeps: every rolling window remembers LimitPeriodMaxDays
// of movements, whatever the settings in force, so that a later settings
// change that adds a longer period decides exactly as a replay will.
const (
	// LimitPeriodMaxDays is the longest limit period a jurisdiction may
	// offer (a month).
	LimitPeriodMaxDays = 31
	// LimitPeriodsMax bounds the periods offered.
	LimitPeriodsMax = 4
	// LimitRaiseDelayMaxHours bounds the raise delay (30 days).
	LimitRaiseDelayMaxHours = 720
	// SelfExclusionMaxMonthsMax bounds the longest self-exclusion term a
	// jurisdiction may offer (10 years); longer is the permanent one.
	SelfExclusionMaxMonthsMax = 120
	// AdjustmentExpiryMaxHours bounds how long an adjustment waits for its
	// approval (30 days): a proposal older than that is stale evidence.
	AdjustmentExpiryMaxHours = 720
	// AdjustmentExpiryBaselineHours is how long an adjustment waits under
	// settings recorded before adjustments existed.
	AdjustmentExpiryBaselineHours = 72
	// RetentionMaxYears bounds the retention of personal data after an
	// account's closure.
	RetentionMaxYears = 30
	// RetentionBaselineYears is the retention under settings recorded
	// before erasures existed: France's five years.
	RetentionBaselineYears = 5
	// LegacyLimitPeriodDays is the period of a LimitChanged recorded before
	// limits had periods (schema 1): the weekly limit.
	LegacyLimitPeriodDays = 7
)

// Settings are a jurisdiction's responsible-gaming parameters: the limit
// periods offered, the delay before a raised limit applies, whether limits
// must be set before the first deposit and the first stake, and the range
// of a self-exclusion's term. They are data, validated at start like the
// rule set, and recorded on the stream (SettingsAdopted) when they change,
// so that every decision is replayed under the settings it was made under.
// Their JSON keys are part of the SettingsAdopted payload: never rename one.
type Settings struct {
	// Jurisdiction names the regulator's country or province ("FR").
	Jurisdiction string `json:"jurisdiction"`
	// Version identifies these settings; it names the SettingsAdopted
	// aggregate, so it is an id (1 to 64 of A-Z a-z 0-9 _ -).
	Version string `json:"version"`
	// LimitPeriodsDays lists the rolling periods, in days, for which a
	// player may set deposit and stake limits, ascending.
	LimitPeriodsDays []int `json:"limit_periods_days"`
	// LimitRaiseDelayHours is how long a raised limit waits before it
	// applies; a lowered one applies at once.
	LimitRaiseDelayHours int `json:"limit_raise_delay_hours"`
	// DepositLimitRequired and StakeLimitRequired refuse a first deposit
	// (stake) until a deposit (stake) limit of some period is set.
	DepositLimitRequired bool `json:"deposit_limit_required"`
	StakeLimitRequired   bool `json:"stake_limit_required"`
	// SelfExclusionMinHours and SelfExclusionMaxMonths bound the term of
	// a self-exclusion for a period, from the time it is asked.
	SelfExclusionMinHours  int `json:"self_exclusion_min_hours"`
	SelfExclusionMaxMonths int `json:"self_exclusion_max_months"`
	// AdjustmentExpiryHours is how long a proposed adjustment waits for
	// its approval; after it, it never moves money. A SettingsAdopted
	// recorded before adjustments existed has none (0): it reads as
	// AdjustmentExpiryBaselineHours.
	AdjustmentExpiryHours int `json:"adjustment_expiry_hours,omitempty"`
	// RetentionAfterClosureYears is how long a player's personal data is
	// kept after the account's closure; then it is due for erasure
	// (docs/privacy.md). A SettingsAdopted recorded before erasures
	// existed has none (0): it reads as RetentionBaselineYears.
	RetentionAfterClosureYears int `json:"retention_after_closure_years,omitempty"`
}

// settingsKeys are the JSON keys of the values a settings file must source.
var settingsKeys = []string{"limit_periods_days", "limit_raise_delay_hours", "deposit_limit_required",
	"stake_limit_required", "self_exclusion_min_hours", "self_exclusion_max_months", "adjustment_expiry_hours",
	"retention_after_closure_years"}

// settingsFile is a jurisdiction file: the settings, a name, and the source
// of every value.
type settingsFile struct {
	Settings
	Name    string            `json:"name"`
	Sources map[string]string `json:"sources"`
}

// SettingsDocument is a validated jurisdiction file: the settings, with the
// name and the source of each value, for people.
type SettingsDocument struct {
	Settings Settings
	Name     string
	Sources  map[string]string
}

// DefaultSettings loads and validates the embedded jurisdiction file.
func DefaultSettings() (*SettingsDocument, error) { return LoadSettings(defaultSettings) }

// BaselineSettings are the settings a stream that records none was decided
// under: the behaviour of Tresor before settings existed. They are a
// contract with every stored stream and never change; a jurisdiction file
// with other values is recorded by the writer as a SettingsAdopted.
func BaselineSettings() Settings {
	return Settings{Jurisdiction: "FR", Version: "fr-1", LimitPeriodsDays: []int{7}, LimitRaiseDelayHours: 24,
		DepositLimitRequired: true, StakeLimitRequired: true, SelfExclusionMinHours: 24, SelfExclusionMaxMonths: 12,
		AdjustmentExpiryHours: AdjustmentExpiryBaselineHours, RetentionAfterClosureYears: RetentionBaselineYears}
}

// LoadSettings reads a jurisdiction file and validates it: every value in
// range and sourced. Any problem is an error wrapping ErrSettings naming the
// key.
func LoadSettings(data []byte) (*SettingsDocument, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f settingsFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: decode: %v", ErrSettings, err)
	}
	if err := f.Settings.Validate(); err != nil {
		return nil, err
	}
	if f.AdjustmentExpiryHours == 0 {
		return nil, fmt.Errorf("%w: adjustment_expiry_hours: want 1 to %d", ErrSettings, AdjustmentExpiryMaxHours)
	}
	if f.RetentionAfterClosureYears == 0 {
		return nil, fmt.Errorf("%w: retention_after_closure_years: want 1 to %d", ErrSettings, RetentionMaxYears)
	}
	for _, k := range settingsKeys {
		if f.Sources[k] == "" {
			return nil, fmt.Errorf("%w: sources: %s has no source", ErrSettings, k)
		}
	}
	if len(f.Sources) != len(settingsKeys) {
		return nil, fmt.Errorf("%w: sources: %d entries, want one per value (%d)", ErrSettings, len(f.Sources), len(settingsKeys))
	}
	return &SettingsDocument{Settings: f.Settings, Name: f.Name, Sources: f.Sources}, nil
}

// Validate checks every value's range. It returns an error wrapping
// ErrSettings that names the key and the value.
func (s Settings) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSettings, fmt.Sprintf(format, args...))
	}
	switch {
	case !ValidID(s.Version):
		return bad("version %q: want 1 to 64 letters, digits, '-' or '_'", s.Version)
	case s.Jurisdiction == "" || len(s.Jurisdiction) > 64:
		return bad("jurisdiction %q: want 1 to 64 characters", s.Jurisdiction)
	case len(s.LimitPeriodsDays) == 0 || len(s.LimitPeriodsDays) > LimitPeriodsMax:
		return bad("limit_periods_days %v: want 1 to %d periods", s.LimitPeriodsDays, LimitPeriodsMax)
	case s.LimitRaiseDelayHours < 0 || s.LimitRaiseDelayHours > LimitRaiseDelayMaxHours:
		return bad("limit_raise_delay_hours %d: want 0 to %d", s.LimitRaiseDelayHours, LimitRaiseDelayMaxHours)
	case s.SelfExclusionMinHours < 1:
		return bad("self_exclusion_min_hours %d: want at least 1", s.SelfExclusionMinHours)
	case s.SelfExclusionMaxMonths < 1 || s.SelfExclusionMaxMonths > SelfExclusionMaxMonthsMax:
		return bad("self_exclusion_max_months %d: want 1 to %d", s.SelfExclusionMaxMonths, SelfExclusionMaxMonthsMax)
	case s.AdjustmentExpiryHours < 0 || s.AdjustmentExpiryHours > AdjustmentExpiryMaxHours:
		return bad("adjustment_expiry_hours %d: want 1 to %d", s.AdjustmentExpiryHours, AdjustmentExpiryMaxHours)
	case s.RetentionAfterClosureYears < 0 || s.RetentionAfterClosureYears > RetentionMaxYears:
		return bad("retention_after_closure_years %d: want 1 to %d", s.RetentionAfterClosureYears, RetentionMaxYears)
	case time.Duration(s.SelfExclusionMinHours)*time.Hour > 28*24*time.Hour*time.Duration(s.SelfExclusionMaxMonths):
		return bad("self_exclusion_min_hours %d is longer than self_exclusion_max_months %d", s.SelfExclusionMinHours, s.SelfExclusionMaxMonths)
	}
	for i, d := range s.LimitPeriodsDays {
		if d < 1 || d > LimitPeriodMaxDays {
			return bad("limit_periods_days %v: period %d days, want 1 to %d", s.LimitPeriodsDays, d, LimitPeriodMaxDays)
		}
		if i > 0 && d <= s.LimitPeriodsDays[i-1] {
			return bad("limit_periods_days %v: want distinct periods in ascending order", s.LimitPeriodsDays)
		}
	}
	return nil
}

// Equal reports whether two settings are the same, version included.
func (s Settings) Equal(o Settings) bool {
	return s.Jurisdiction == o.Jurisdiction && s.Version == o.Version && slices.Equal(s.LimitPeriodsDays, o.LimitPeriodsDays) &&
		s.LimitRaiseDelayHours == o.LimitRaiseDelayHours && s.DepositLimitRequired == o.DepositLimitRequired &&
		s.StakeLimitRequired == o.StakeLimitRequired && s.SelfExclusionMinHours == o.SelfExclusionMinHours &&
		s.SelfExclusionMaxMonths == o.SelfExclusionMaxMonths && s.withDefaults().AdjustmentExpiryHours == o.withDefaults().AdjustmentExpiryHours &&
		s.withDefaults().RetentionAfterClosureYears == o.withDefaults().RetentionAfterClosureYears
}

// withDefaults gives settings recorded before adjustments (erasures)
// existed their baseline expiry (retention).
func (s Settings) withDefaults() Settings {
	if s.AdjustmentExpiryHours == 0 {
		s.AdjustmentExpiryHours = AdjustmentExpiryBaselineHours
	}
	if s.RetentionAfterClosureYears == 0 {
		s.RetentionAfterClosureYears = RetentionBaselineYears
	}
	return s
}

// AdjustmentExpiry is how long a proposed adjustment waits for its
// approval.
func (s Settings) AdjustmentExpiry() time.Duration {
	return time.Duration(s.withDefaults().AdjustmentExpiryHours) * time.Hour
}

// Offers reports whether a limit period (in days) is offered.
func (s Settings) Offers(days int) bool { return slices.Contains(s.LimitPeriodsDays, days) }

// RaiseDelay is how long a raised limit waits.
func (s Settings) RaiseDelay() time.Duration {
	return time.Duration(s.LimitRaiseDelayHours) * time.Hour
}

// SelfExclusionRange returns the earliest and latest end of a
// self-exclusion term asked at now.
func (s Settings) SelfExclusionRange(now time.Time) (earliest, latest time.Time) {
	return now.Add(time.Duration(s.SelfExclusionMinHours) * time.Hour), now.AddDate(0, s.SelfExclusionMaxMonths, 0)
}

// clone returns a copy that shares nothing with s.
func (s Settings) clone() Settings {
	s.LimitPeriodsDays = slices.Clone(s.LimitPeriodsDays)
	return s
}
