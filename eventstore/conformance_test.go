package eventstore_test

import (
	"testing"

	"github.com/fdj/tresor/eventstore/eventstoretest"
)

func TestConformanceEmbedded(t *testing.T) {
	eventstoretest.Run(t, embeddedBackend(t))
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped in -short")
	}
	eventstoretest.Run(t, clusterBackend(eventstoretest.StartCluster(t)))
}
