package store

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Open opens (or creates) the store in dir.
func Open(dir string) (*Store, error) {
	db, err := openChecked(filepath.Join(dir, FileName), &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open VM store: %w", err)
	}
	if err := db.View(func(tx *bolt.Tx) error { return checkFormat(tx, db.Path()) }); err != nil {
		db.Close()
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketContainers, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(FormatVersion)))
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init VM store: %w", err)
	}
	s := &Store{db: db, w: newWriter(db), copies: newCopyWriter(dir)}
	if err := s.copyAll(); err != nil {
		s.Close()
		return nil, fmt.Errorf("VM store %s: %w", db.Path(), err)
	}
	return s, nil
}

// Close closes the store, once the record copies queued are written.
func (s *Store) Close() error {
	s.copies.close()
	return s.db.Close()
}
