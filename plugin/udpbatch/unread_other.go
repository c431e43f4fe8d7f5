//go:build !linux

package udpbatch

// unreadQueries is never called where udpbatch does not batch.
func (s *socket) unreadQueries() bool { return false }
