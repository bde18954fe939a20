package eventstore

import (
	"encoding/json"
	"fmt"
)

// Upcaster turns the payload of schema version v into version v+1. It must
// be pure: the stored event never changes, only what readers see.
type Upcaster func(payload json.RawMessage) (json.RawMessage, error)

// typeInfo is what the registry knows about one event type.
type typeInfo struct {
	current   uint32
	upcasters []Upcaster // upcasters[v-1] turns v into v+1
}

// Registry knows every event type the binary can read, its current schema
// version and the upcasters that bring old payloads to it. It is the one
// place where upcasting happens: readers of the store only ever see current
// versions. Fill it before opening the store; it is read-only afterwards and
// then safe for concurrent use.
type Registry struct {
	types map[string]typeInfo
}

// NewRegistry returns a registry that already knows the store's own Seal
// and Void events.
func NewRegistry() *Registry {
	r := &Registry{types: map[string]typeInfo{}}
	r.types[SealType] = typeInfo{current: SealSchemaVersion}
	r.types[VoidType] = typeInfo{current: VoidSchemaVersion}
	r.types[SealKeyRotatedType] = typeInfo{current: SealKeyRotatedSchemaVersion}
	r.types[SealKeyRevokedType] = typeInfo{current: SealKeyRevokedSchemaVersion}
	return r
}

// Register declares typ at schema version current. upcasters must hold
// exactly current-1 functions: upcasters[0] turns version 1 into 2, and so
// on. It returns an error wrapping ErrInvalid for a bad name, a duplicate
// type or a wrong number of upcasters.
func (r *Registry) Register(typ string, current uint32, upcasters ...Upcaster) error {
	if !validName(typ, TypeLenMax, true) || current == 0 {
		return fmt.Errorf("register event type %q version %d: %w", typ, current, ErrInvalid)
	}
	if _, dup := r.types[typ]; dup {
		return fmt.Errorf("register event type %q: already registered: %w", typ, ErrInvalid)
	}
	if len(upcasters) != int(current)-1 {
		return fmt.Errorf("register event type %q version %d: want %d upcasters, got %d: %w",
			typ, current, current-1, len(upcasters), ErrInvalid)
	}
	r.types[typ] = typeInfo{current: current, upcasters: upcasters}
	return nil
}

// Current returns the schema version writers must use for typ. It returns
// a *SchemaError wrapping ErrUnknownType for an unknown type.
func (r *Registry) Current(typ string) (uint32, error) {
	info, ok := r.types[typ]
	if !ok {
		return 0, &SchemaError{Type: typ, kind: ErrUnknownType}
	}
	return info.current, nil
}

// checkWrite refuses events a reader of this binary could not read back:
// unknown types and versions other than the current one.
func (r *Registry) checkWrite(ev *Event) error {
	info, ok := r.types[ev.Type]
	if !ok {
		return &SchemaError{Type: ev.Type, Version: ev.SchemaVersion, kind: ErrUnknownType}
	}
	if ev.SchemaVersion != info.current {
		return fmt.Errorf("event type %q: write schema %d, current is %d: %w", ev.Type, ev.SchemaVersion, info.current, ErrInvalid)
	}
	return nil
}

// Upcast brings ev to the current schema version of its type, in place.
// The hash fields keep describing the stored bytes. It returns a
// *SchemaError wrapping ErrUnknownType or ErrSchemaTooNew, or the
// upcaster's error wrapped with the type and versions.
func (r *Registry) Upcast(ev *RecordedEvent) error {
	info, ok := r.types[ev.Type]
	if !ok {
		return &SchemaError{Type: ev.Type, Version: ev.SchemaVersion, Sequence: ev.Sequence, kind: ErrUnknownType}
	}
	if ev.SchemaVersion > info.current {
		return &SchemaError{Type: ev.Type, Version: ev.SchemaVersion, Current: info.current, Sequence: ev.Sequence, kind: ErrSchemaTooNew}
	}
	for ev.SchemaVersion < info.current {
		p, err := info.upcasters[ev.SchemaVersion-1](ev.Payload)
		if err != nil {
			return fmt.Errorf("upcast %s from schema %d at sequence %d: %w", ev.Type, ev.SchemaVersion, ev.Sequence, err)
		}
		ev.Payload = p
		ev.SchemaVersion++
	}
	return nil
}
