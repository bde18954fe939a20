package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestANameClaimThatLapsedIsClaimedAgainOrTaken: a claim whose key was
// deleted under it (as the server expires a claim not renewed within the
// TTL, its process cut off) is claimed again quietly while the name is
// free; once another process has written its own claim over it, the
// claim says it was taken and by whom, and is no longer held.
func TestANameClaimThatLapsedIsClaimedAgainOrTaken(t *testing.T) {
	nc := embeddedConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := ClaimName(ctx, nc, "node-1", "first", LeaseConfig{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(ctx)
	if !c.Held() {
		t.Fatal("a claim just made is not held")
	}
	kv, key := c.lease.kv, c.lease.chain

	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if held, err := c.lease.Info(ctx); err == nil && held.Holder == "first" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a lapsed claim was not claimed again while the name was free")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("claimed again, yet: %v", err)
	}

	second, _ := json.Marshal(LeaseInfo{Holder: "second"})
	if _, err := kv.Put(ctx, key, second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Taken():
	case <-time.After(10 * time.Second):
		t.Fatal("a claim written over by another process is not said taken")
	}
	if err := c.Err(); !errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), `node name "node-1" claimed by another process (second)`) {
		t.Fatalf("taken: %v", err)
	}
	// Not renewed since it was written over, it is no longer held a TTL
	// after its last renewal.
	for c.Held() {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatal("a claim taken by another process still says it is held")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
