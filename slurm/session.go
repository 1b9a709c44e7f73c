package slurm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// A Session is one scontrol process that takes its commands on stdin, one a
// line: scontrol's interactive mode, which man scontrol documents ("If no
// command is entered on the execute line, scontrol will operate in an
// interactive mode and prompt for input"). A reconcile of random presence
// on 10,000 nodes is close to 10,000 update RPCs, one per distinct
// ActiveFeatures value (an update carries one value for a hostlist); one
// scontrol process for each cost 5.3–5.9 ms of process start-up on 2 cores
// (docs/slurm/behaviour.md §3), more than the RPC itself. A session pays
// start-up once per reconcile and keeps every other property of scontrol:
// Slurm's own client of its own release, the same munge authentication,
// the same argument syntax and errors, one RPC per update
// (src/scontrol/update_node.c calls slurm_update_node once), and no
// binding to libslurm's ABI, which changes with every release the
// coordinator must run against (22.05, 24.11, 26.05). slurmrestd would be
// a daemon to deploy and has no node update before 23.02's v0.0.39;
// Slurm's RPC wire format is no supported interface at all.
//
// scontrol says nothing when an update works and writes an error to stderr
// when it fails; to tell where one command's answer ends, every command is
// followed by a marker line that is no scontrol keyword, which scontrol
// answers, without any RPC, with "invalid keyword: <marker>" on stderr,
// unbuffered (src/scontrol/scontrol.c, _process_command, the same on 22.05,
// 24.11 and 26.05). A failed command does not end the loop: _process_command
// returns 0 and only the exit status remembers it. stdout (readline echoes
// each line there, and "show hostnames" would print there, buffered) is
// discarded.
//
// A line the interactive parser would read differently from an argument
// vector is not sent there (see sessionSafe): such a command runs as a
// process of its own, as Runner.Run runs it. A Session is used by one
// goroutine at a time.
type Session struct {
	r      *Runner
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	done   chan struct{} // closed when scontrol's stderr ends
	seq    int
	closed bool
}

// sessionMaxLine is the longest command line sent to a session. scontrol
// built without readline reads lines with fgets into 4,096 bytes and takes
// a longer one for the end of input (_getline in src/scontrol/scontrol.c);
// Debian's scontrol links readline, which has no limit, but a site's may
// not. A longer command (an AvailableFeatures superset of a large catalog)
// runs as a process of its own.
const sessionMaxLine = 4000

// sessionSafe says whether args mean the same on a session's line as in an
// argument vector: scontrol's interactive parser splits words at white
// space unless quoted with ' or " (and keeps the quotes), repeats the last
// line for "!!", and takes at most 128 words (MAX_INPUT_FIELDS).
func sessionSafe(args []string) bool {
	if len(args) == 0 || len(args) > 100 || args[0] == "!!" {
		return false
	}
	n := len(args) - 1
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\r\v\f'\"\x00") {
			return false
		}
		n += len(a)
	}
	return n <= sessionMaxLine
}

// StartSession starts scontrol in interactive mode for commands given with
// Session.Run. Close ends it. ctx bounds the whole session.
func (r *Runner) StartSession(ctx context.Context) (*Session, error) {
	cmd, err := r.command(ctx, "scontrol", nil)
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, &CommandError{Args: []string{"scontrol"}, Err: err}
	}
	s := &Session{r: r, cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	return s, nil
}

// errSessionEnded: scontrol exited, or stopped answering, in the middle of
// a session.
var errSessionEnded = errors.New("scontrol's interactive session ended before it answered")

// Run sends one command (args as Runner.Run takes them after "scontrol")
// and waits for its answer: nil when scontrol printed nothing for it, a
// *CommandError with what it printed otherwise. A command sessionSafe
// refuses runs as a process of its own. After a session error (scontrol
// gone, or no answer within the Runner's timeout) the session is closed and
// every later command runs as a process of its own, so that one bad
// moment does not cost a reconcile; a command scontrol exited without
// answering is made again that way (commands are updates, which set
// values: making one twice is harmless).
func (s *Session) Run(ctx context.Context, args ...string) error {
	if s.closed || !sessionSafe(args) {
		_, err := s.r.Run(ctx, "scontrol", args...)
		return err
	}
	all := append([]string{"scontrol"}, args...)
	s.seq++
	marker := "llmgw-end-of-command-" + strconv.Itoa(s.seq)
	line := strings.Join(args, " ") + "\n" + marker + "\n"
	if _, err := io.WriteString(s.stdin, line); err != nil {
		// scontrol exited before this command (EPIPE): it never read it,
		// so it is made as a process of its own, as when scontrol exits
		// without answering below.
		s.Close()
		_, err := s.r.Run(ctx, "scontrol", args...)
		return err
	}
	timeout := s.r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var said []string
	for {
		select {
		case l := <-s.lines:
			if strings.HasSuffix(l, marker) {
				if len(said) == 0 {
					return nil
				}
				msg := strings.Join(said, "\n")
				if len(msg) > maxStderr {
					msg = msg[:maxStderr] + "…"
				}
				return &CommandError{Args: all, Stderr: msg, Err: errors.New("scontrol reported an error")}
			}
			said = append(said, l)
		case <-s.done:
			// scontrol exited without answering: it may not have read the
			// command at all. An update sets values, so making it again
			// as a process of its own is safe.
			s.Close()
			_, err := s.r.Run(ctx, "scontrol", args...)
			return err
		case <-timer.C:
			s.Close()
			return &CommandError{Args: all, Err: fmt.Errorf("%w: no answer within %s: %w", errSessionEnded, timeout, context.DeadlineExceeded)}
		case <-ctx.Done():
			s.Close()
			return &CommandError{Args: all, Err: ctx.Err()}
		}
	}
}

// Alive says whether commands still go to the session's scontrol (not to
// a process each, after a session error).
func (s *Session) Alive() bool { return !s.closed }

// Close ends the session: scontrol reads the end of its input and exits;
// one that does not within a second is killed.
func (s *Session) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.stdin.Close()
	go func() {
		// Drain whatever scontrol still writes, so it never blocks on a
		// full pipe while exiting.
		for {
			select {
			case <-s.lines:
			case <-s.done:
				return
			}
		}
	}()
	exited := make(chan struct{})
	go func() {
		s.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(time.Second):
		s.cmd.Process.Kill()
		<-exited
	}
}
