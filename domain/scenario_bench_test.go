package domain

import "testing"

// BenchmarkScenarioGenerateAndValidate measures what the write side pays
// per unit sold and the auditor per unit replayed: one scenario generated
// and validated. The target is 10 µs or less on one core. (The name starts
// with Scenario so that -bench Scenario selects it.)
func BenchmarkScenarioGenerateAndValidate(b *testing.B) {
	salts := benchSalts()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tier := Tiers[i%TierCount]
		if err := ValidateScenario(GenerateScenario(salts[i%len(salts)], tier), tier); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkScenarioGenerate isolates the generator, whose cost is mostly the
// HMAC-SHA256 blocks of its stream.
func BenchmarkScenarioGenerate(b *testing.B) {
	salts := benchSalts()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		GenerateScenario(salts[i%len(salts)], Tiers[i%TierCount])
		i++
	}
}

// BenchmarkScenarioValidate isolates the validator, which must not
// allocate on a valid scenario.
func BenchmarkScenarioValidate(b *testing.B) {
	scenarios := make([]Scenario, TierCount)
	for i, tier := range Tiers {
		scenarios[i] = GenerateScenario(testSalt(uint64(i)), tier)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := ValidateScenario(scenarios[i%TierCount], Tiers[i%TierCount]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// benchSalts are distinct deterministic salts, so that the benchmark sees
// varied paths and chest counts.
func benchSalts() [][32]byte {
	salts := make([][32]byte, 1021)
	for i := range salts {
		salts[i] = testSalt(uint64(i))
	}
	return salts
}
