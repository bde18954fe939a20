package memstore_test

import (
	"testing"

	"github.com/fdj/tresor/domain"
	"github.com/fdj/tresor/projections"
	"github.com/fdj/tresor/projections/memstore"
	"github.com/fdj/tresor/projections/projectionstest"
)

func TestConformance(t *testing.T) {
	stores := map[string]*memstore.Store{}
	projectionstest.Run(t, func(tb testing.TB, rules *domain.RuleSet, name string) projections.Store {
		// A restarted in-memory projection keeps its store: this store is
		// what survives while the process runs.
		key := tb.Name() + "/" + name
		if s := stores[key]; s != nil {
			return s
		}
		s := memstore.New(rules)
		stores[key] = s
		tb.Cleanup(func() { _ = s.Close() })
		return s
	})
}
