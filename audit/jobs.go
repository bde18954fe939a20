package audit

import (
	"fmt"

	"github.com/fdj/tresor/domain"
)

// Kinds of pure checks: they need no state beyond what the job carries, so
// workers run them in any order while the stream is read.
const (
	jobProof    = iota // a unit's inclusion proof against its block's root
	jobScenario        // a settled play's throws against its unit's scenario
	jobReveal          // a closed block's seed against its commitment and sold units
)

type job struct {
	kind    uint8
	seq     uint64
	subject string
	// jobProof
	root  [32]byte
	size  int
	proof domain.UnitProof
	// jobScenario
	salt  [32]byte
	tier  domain.Tier
	shown [domain.ThrowCount]domain.ThrowResult
	// jobReveal
	reveal *reveal
}

// reveal is what the check of a closed block needs: the seed revealed, the
// commitment, the Article 3 multiset and the units sold.
type reveal struct {
	block      string
	seed       domain.Seed
	commitment domain.Commitment
	lots       [domain.TierCount]int
	units      []unit
}

// jobBatch is a run of pure checks handed to a worker at once.
type jobBatch struct{ jobs []job }

// job queues a pure check; full batches go to the workers.
func (s *state) job(j job) {
	if s.jobs == nil {
		s.jobs = &jobBatch{jobs: make([]job, 0, jobsPerBatch)}
	}
	s.jobs.jobs = append(s.jobs.jobs, j)
	if len(s.jobs.jobs) == jobsPerBatch || j.kind == jobReveal {
		s.flushJobs()
	}
}

func (s *state) flushJobs() {
	if s.jobs != nil && len(s.jobs.jobs) > 0 {
		s.a.jobs.Add(1)
		s.a.work <- s.jobs
	}
	s.jobs = nil
}

func (jb *jobBatch) run(a *Auditor) {
	defer a.jobs.Done()
	for i := range jb.jobs {
		j := &jb.jobs[i]
		switch j.kind {
		case jobProof:
			if err := domain.VerifyUnitProof(j.root, j.size, j.proof); err != nil {
				a.vs.add(Violation{Sequence: j.seq, Code: CodeProofInvalid, Subject: j.subject,
					Expected: fmt.Sprintf("a proof of unit %d (%s) to root %x", j.proof.Unit, j.proof.Tier, j.root), Found: err.Error()})
			}
		case jobScenario:
			checkScenario(a, j)
		case jobReveal:
			checkReveal(a, j)
		}
	}
}

// checkScenario rebuilds a unit's scenario from its salt and tier, checks it
// evaluates to the tier (Article 4.5) and that the four throws shown are
// its throws.
func checkScenario(a *Auditor, j *job) {
	sc := domain.GenerateScenario(j.salt, j.tier)
	if err := domain.ValidateScenario(sc, j.tier); err != nil {
		a.vs.add(Violation{Sequence: j.seq, Code: CodeScenarioMismatch, Subject: j.subject, Expected: "a scenario of tier " + j.tier.ID(), Found: err.Error()})
		return
	}
	want, err := sc.Play()
	if err != nil {
		a.vs.add(Violation{Sequence: j.seq, Code: CodeScenarioMismatch, Subject: j.subject, Expected: "a scenario that plays", Found: err.Error()})
		return
	}
	for i := range want {
		if want[i] != j.shown[i] {
			a.vs.add(Violation{Sequence: j.seq, Code: CodeScenarioMismatch, Subject: fmt.Sprintf("%s throw %d", j.subject, i+1),
				Expected: throwText(want[i]), Found: throwText(j.shown[i])})
		}
	}
}

// checkReveal rebuilds a closed block's deck from its revealed seed: the
// seed must hash to the committed seed hash, the deck must have the
// committed root, and every sold unit the tier and salt it was sold with.
func checkReveal(a *Auditor, j *job) {
	r := j.reveal
	if h := r.seed.Hash(); h != r.commitment.SeedHash {
		a.vs.add(Violation{Sequence: j.seq, Code: CodeSeedMismatch, Subject: j.subject,
			Expected: fmt.Sprintf("a seed hashing to %x", r.commitment.SeedHash), Found: fmt.Sprintf("a seed hashing to %x", h)})
		return
	}
	n := 0
	for _, c := range r.lots {
		n += c
	}
	if n != r.commitment.Units || n == 0 {
		a.vs.add(Violation{Sequence: j.seq, Code: CodeSeedMismatch, Subject: j.subject,
			Expected: fmt.Sprintf("a deck of %d units", r.commitment.Units), Found: fmt.Sprintf("Article 3 lots of %d units", n)})
		return
	}
	deck := domain.BuildDeck(r.lots, r.seed)
	if deck.Commitment.Root != r.commitment.Root {
		a.vs.add(Violation{Sequence: j.seq, Code: CodeSeedMismatch, Subject: j.subject,
			Expected: fmt.Sprintf("root %x", r.commitment.Root), Found: fmt.Sprintf("root %x", deck.Commitment.Root)})
		return
	}
	for i := range r.units {
		u := &r.units[i]
		if u.status < unitAssigned || i >= len(deck.Tiers) {
			continue
		}
		if u.tier != deck.Tiers[i] || u.salt != deck.Keys.UnitSalt(uint32(i)) {
			a.vs.add(Violation{Sequence: u.assignSeq, Code: CodeUnitMismatch, Subject: "play " + domain.PlayID(r.block, uint32(i)),
				Expected: fmt.Sprintf("tier %s salt %x", deck.Tiers[i], deck.Keys.UnitSalt(uint32(i))), Found: fmt.Sprintf("tier %s salt %x", u.tier, u.salt)})
		}
	}
}
