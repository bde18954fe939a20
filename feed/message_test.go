package feed_test

import (
	"testing"

	"github.com/fdj/tresor/feed"
)

// TestMessageUUIDIsPinned pins the derivation docs/feed.md gives, so that
// a consumer's recomputed UUIDs never stop matching.
func TestMessageUUIDIsPinned(t *testing.T) {
	for _, tc := range []struct {
		kind        feed.Kind
		event, want string
	}{
		{feed.KindPostings, "VHiU4SkkKLZxqj2ugRWM0w", "8220e473-7f8d-5c0d-a8ef-ef6c80ea40ac"},
		{feed.KindPlaySettled, "VHiU4SkkKLZxqj2ugRdzFw", "1b373b61-43e6-5e7b-bc6b-b47cf81d69bb"},
	} {
		if got := feed.MessageUUID(tc.kind, tc.event); got != tc.want {
			t.Errorf("MessageUUID(%s, %s) = %s, want %s", tc.kind, tc.event, got, tc.want)
		}
	}
	if feed.MessageUUID(feed.KindPostings, "e1") == feed.MessageUUID(feed.KindPlaySettled, "e1") {
		t.Error("two kinds of the same event share a UUID")
	}
}

func TestParseKinds(t *testing.T) {
	for in, want := range map[string]feed.Kinds{
		"postings,plays": feed.AllKinds, "plays": {Plays: true}, "postings": {Postings: true}, " plays , postings": feed.AllKinds,
	} {
		if got, err := feed.ParseKinds(in); err != nil || got != want {
			t.Errorf("ParseKinds(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "prizes", "postings,"} {
		if _, err := feed.ParseKinds(in); err == nil {
			t.Errorf("ParseKinds(%q) accepted", in)
		}
	}
}
