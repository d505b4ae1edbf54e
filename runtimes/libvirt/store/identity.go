package store

import (
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
)

// keyLastIdentity (bucket meta) is the VM identity handed out last: a
// crimux started again goes on after it (vmidentity's Allocator), so
// that a number just freed is the last to be given again, not the first.
var keyLastIdentity = []byte("last_identity")

// LastIdentity is the uid SetLastIdentity recorded last; ok is false
// when none is (a store of an older crimux, or one rebuilt from the
// record copies, which carry no cursor) or what is there is not one: the
// cursor only orders the search, the records say what is free.
func (s *Store) LastIdentity() (uid uint32, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucketMeta).Get(keyLastIdentity)
		if len(raw) != 4 {
			return nil
		}
		uid, ok = binary.BigEndian.Uint32(raw), true
		return nil
	})
	return uid, ok, err
}

// SetLastIdentity records uid as the VM identity handed out last.
func (s *Store) SetLastIdentity(uid uint32) error {
	raw := binary.BigEndian.AppendUint32(nil, uid)
	return s.w.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyLastIdentity, raw) })
}
