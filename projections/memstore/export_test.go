package memstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
)

// Sections keeps a snapshot's sections in memory as eventstore's parts
// would: Encode writes into it and Restore opens its shards. Fail makes a
// shard's opening fail, as a part pruned or refused does.
type Sections struct {
	Secs   [][]byte
	Fail   map[int]bool
	opened atomic.Int64
}

func (s *Sections) Write(p []byte) (int, error) {
	if len(s.Secs) == 0 {
		s.Secs = append(s.Secs, nil)
	}
	s.Secs[len(s.Secs)-1] = append(s.Secs[len(s.Secs)-1], p...)
	return len(p), nil
}

func (s *Sections) Cut() error {
	s.Secs = append(s.Secs, nil)
	return nil
}

// Hot reads the first section.
func (s *Sections) Hot() io.Reader { return bytes.NewReader(s.Secs[0]) }

func (s *Sections) Len() int { return len(s.Secs) - 1 }

func (s *Sections) Open(_ context.Context, i int) (io.ReadCloser, error) {
	s.opened.Add(1)
	if s.Fail[i] {
		return nil, errors.New("part not found")
	}
	return io.NopCloser(bytes.NewReader(s.Secs[i+1])), nil
}

// Opened is how many shards were opened.
func (s *Sections) Opened() int { return int(s.opened.Load()) }

// ShardCount and PlayerShard expose the layout to tests.
const ShardCount = shardCount

func PlayerShard(player string) int { return playerShard(player) }

// LoadAll loads every shard not loaded yet, as a restore of format 2 did.
func (s *Store) LoadAll() error { return s.ensure(context.Background(), allShards) }
