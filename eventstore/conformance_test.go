package eventstore_test

import (
	"fmt"
	"testing"

	"github.com/fdj/tresor/eventstore/eventstoretest"
)

// pipelinedDepth is the depth the pipelined runs use.
const pipelinedDepth = 4

// TestConformanceEmbedded runs the suite with one batch in flight per
// chain and pipelined.
func TestConformanceEmbedded(t *testing.T) {
	for _, depth := range []int{1, pipelinedDepth} {
		t.Run(fmt.Sprintf("depth%d", depth), func(t *testing.T) {
			b := embeddedBackend(t)
			b.PipelineDepth = depth
			eventstoretest.Run(t, b)
		})
	}
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	eventstoretest.Run(t, clusterBackend(eventstoretest.StartCluster(t)))
}
