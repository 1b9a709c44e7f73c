package munge_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// codecs are both ways to reach one munged.
func codecs(c munge.Codec) map[string]munge.Codec {
	out := map[string]munge.Codec{"programs": &munge.Programs{Path: c.Socket()}}
	w := munge.New(c.Socket()).(*munge.Wire)
	if l, ok := w.Enc.(*munge.Lib); ok {
		out["lib"] = l
	}
	out["wire"] = w
	return out
}

func TestDecodeTellsOriginUIDAndRefusesReplay(t *testing.T) {
	realm := mungetest.New(t)
	node := realm.Start("127.0.0.2")
	coord := realm.Start("127.0.0.1")
	ctx := context.Background()
	for name, enc := range codecs(node) {
		for dname, dec := range codecs(coord) {
			t.Run(name+"-to-"+dname, func(t *testing.T) {
				payload := []byte("llmgw\nPOST /v1/reports\n" + name + dname)
				cred, err := enc.Encode(ctx, payload)
				if err != nil {
					t.Fatal(err)
				}
				c, err := dec.Decode(ctx, cred)
				if err != nil {
					t.Fatal(err)
				}
				if c.UID != 0 || c.GID != 0 || c.Addr.String() != "127.0.0.2" || !bytes.Equal(c.Payload, payload) {
					t.Errorf("decoded %+v (payload %q), want uid 0 gid 0 from 127.0.0.2 with %q", c, c.Payload, payload)
				}
				_, err = dec.Decode(ctx, cred)
				if !munge.IsReplayed(err) {
					t.Errorf("second decode of one credential: %v, want munged's replay refusal", err)
				}
			})
		}
	}
}

func TestDecodeTellsUserOfNonRootCredential(t *testing.T) {
	realm := mungetest.New(t)
	node := realm.Start("127.0.0.3")
	coord := realm.Start("127.0.0.1")
	for dname, dec := range codecs(coord) {
		cred := mungetest.EncodeAs(t, node, 65534, 65534, []byte("x"))
		c, err := dec.Decode(context.Background(), cred)
		if err != nil {
			t.Fatalf("%s: %v", dname, err)
		}
		if c.UID != 65534 || c.GID != 65534 || c.Addr.String() != "127.0.0.3" {
			t.Errorf("%s: decoded %+v, want uid and gid 65534 from 127.0.0.3", dname, c)
		}
	}
}

func TestDecodeRefusesOtherKeyAndGarbage(t *testing.T) {
	other := mungetest.New(t).Start("127.0.0.4")
	coord := mungetest.New(t).Start("127.0.0.1")
	cred, err := other.Encode(context.Background(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for dname, dec := range codecs(coord) {
		for _, in := range []string{cred, "garbage", "", "MUNGE:AAAA:"} {
			if c, err := dec.Decode(context.Background(), in); err == nil {
				t.Errorf("%s: decoding %.30q gave %+v, want an error", dname, in, c)
			}
		}
	}
}

// BenchmarkDecode is the coordinator's cost per authenticated report:
// 10,000 nodes every 30 s are 333 decodes a second. Run in parallel, as
// the coordinator's handlers do. Encoding is outside the timer.
func BenchmarkDecode(b *testing.B) {
	realm := mungetest.New(b)
	node := realm.Start("127.0.0.2")
	coord := realm.Start("127.0.0.1")
	for name, dec := range codecs(coord) {
		b.Run(name, func(b *testing.B) {
			b.StopTimer()
			lib := munge.New(node.Socket())
			creds := make(chan string, b.N)
			for i := range b.N {
				c, err := lib.Encode(context.Background(), fmt.Appendf(nil, "%d", i))
				if err != nil {
					b.Fatal(err)
				}
				creds <- c
			}
			close(creds)
			b.StartTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := dec.Decode(context.Background(), <-creds); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
