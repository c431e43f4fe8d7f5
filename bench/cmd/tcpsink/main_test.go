package main

import "testing"

func TestAddrs(t *testing.T) {
	as, err := addrs("127.54.0.255", 3)
	if err != nil || len(as) != 3 || as[1].String() != "127.54.1.0" || as[2].String() != "127.54.1.1" {
		t.Fatalf("got %v %v", as, err)
	}
	for _, tc := range []struct {
		base  string
		count int
	}{{"10.0.0.1", 1}, {"::1", 1}, {"127.255.255.255", 2}, {"127.0.0.1", 0}, {"x", 1}} {
		if _, err := addrs(tc.base, tc.count); err == nil {
			t.Errorf("addrs(%s, %d): want an error", tc.base, tc.count)
		}
	}
}
