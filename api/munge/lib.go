//go:build cgo

package munge

/*
#cgo LDFLAGS: -lmunge
#include <stdlib.h>
#include <string.h>
#include <munge.h>
#include <netinet/in.h>

// cgo cannot call the variadic munge_ctx_set/get; these fix the types.
static munge_err_t llmgw_set_socket(munge_ctx_t ctx, const char *path) {
	return munge_ctx_set(ctx, MUNGE_OPT_SOCKET, path);
}
static munge_err_t llmgw_get_addr4(munge_ctx_t ctx, unsigned char out[4]) {
	struct in_addr a;
	munge_err_t e = munge_ctx_get(ctx, MUNGE_OPT_ADDR4, &a);
	if (e == EMUNGE_SUCCESS) memcpy(out, &a.s_addr, 4);
	return e;
}
*/
import "C"

import (
	"context"
	"net/netip"
	"unsafe"
)

// Lib talks to munged through libmunge: one socket round trip per call, no
// process started.
type Lib struct{ Path string }

func newLib(socket string) Codec { return &Lib{Path: socket} }

func (l *Lib) Socket() string { return l.Path }

// ctx is one libmunge context on l's socket; the caller destroys it. A
// context is not safe for concurrent use, so each call makes its own (it
// is a small malloc, nothing more).
func (l *Lib) ctx(op string) (C.munge_ctx_t, error) {
	ctx := C.munge_ctx_create()
	if ctx == nil {
		return nil, &Error{Op: op, Status: int(C.EMUNGE_NO_MEMORY), Msg: "cannot create a munge context"}
	}
	p := C.CString(l.Path)
	defer C.free(unsafe.Pointer(p))
	if e := C.llmgw_set_socket(ctx, p); e != C.EMUNGE_SUCCESS {
		err := l.err(op, ctx, e)
		C.munge_ctx_destroy(ctx)
		return nil, err
	}
	return ctx, nil
}

func (l *Lib) err(op string, ctx C.munge_ctx_t, e C.munge_err_t) error {
	msg := C.GoString(C.munge_ctx_strerror(ctx))
	if msg == "" {
		msg = C.GoString(C.munge_strerror(e))
	}
	return &Error{Op: op, Status: int(e), Msg: msg + " (socket " + l.Path + ")"}
}

// Encode makes a credential carrying payload, as the calling process's uid.
func (l *Lib) Encode(_ context.Context, payload []byte) (string, error) {
	ctx, err := l.ctx("encode")
	if err != nil {
		return "", err
	}
	defer C.munge_ctx_destroy(ctx)
	var buf unsafe.Pointer
	if len(payload) > 0 {
		buf = C.CBytes(payload)
		defer C.free(buf)
	}
	var cred *C.char
	if e := C.munge_encode(&cred, ctx, buf, C.int(len(payload))); e != C.EMUNGE_SUCCESS {
		return "", l.err("encode", ctx, e)
	}
	defer C.free(unsafe.Pointer(cred))
	return C.GoString(cred), nil
}

// Decode checks cred with munged and returns what it says.
func (l *Lib) Decode(_ context.Context, cred string) (Cred, error) {
	ctx, err := l.ctx("decode")
	if err != nil {
		return Cred{}, err
	}
	defer C.munge_ctx_destroy(ctx)
	cs := C.CString(cred)
	defer C.free(unsafe.Pointer(cs))
	var buf unsafe.Pointer
	var n C.int
	var uid C.uid_t
	var gid C.gid_t
	e := C.munge_decode(cs, ctx, &buf, &n, &uid, &gid)
	if buf != nil {
		defer C.free(buf)
	}
	if e != C.EMUNGE_SUCCESS {
		return Cred{}, l.err("decode", ctx, e)
	}
	var a [4]C.uchar
	if e := C.llmgw_get_addr4(ctx, &a[0]); e != C.EMUNGE_SUCCESS {
		return Cred{}, l.err("decode", ctx, e)
	}
	out := Cred{
		UID:  uint32(uid),
		GID:  uint32(gid),
		Addr: netip.AddrFrom4([4]byte{byte(a[0]), byte(a[1]), byte(a[2]), byte(a[3])}),
	}
	if n > 0 {
		out.Payload = C.GoBytes(buf, n)
	}
	return out, nil
}
