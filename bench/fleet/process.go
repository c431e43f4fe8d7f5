package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// replicaEnv names the Corefile of a replica process (this program started again).
const replicaEnv = "FLEET_BENCH_COREFILE"

// replica is one replica process.
type replica struct {
	name, dns, metrics string
	cmd                *exec.Cmd
	stdin              io.WriteCloser
	done               chan struct{}
}

// startReplica starts this program as a replica named name serving on addr; it logs to
// path.NAME.log.
func startReplica(path, name, addr string) (*replica, error) {
	port, err := freePort(addr)
	if err != nil {
		return nil, err
	}
	mport, err := freePort(addr)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), replicaEnv+"="+path, "REPLICA="+name, "ADDR="+addr,
		"DNSPORT="+strconv.Itoa(port), "METRICSPORT="+strconv.Itoa(mport))
	logs, err := os.Create(path + "." + name + ".log")
	if err != nil {
		return nil, err
	}
	defer logs.Close() // the child has its own descriptor
	cmd.Stderr = logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	r := &replica{name: name, dns: net.JoinHostPort(addr, strconv.Itoa(port)), metrics: net.JoinHostPort(addr, strconv.Itoa(mport)), cmd: cmd, done: make(chan struct{})}
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(r.done) }()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
		for sc.Scan() {
		}
	}()
	select {
	case l := <-line:
		if l != "ready" {
			r.stop()
			return nil, fmt.Errorf("replica %s: %s (log: %s)", name, l, logs.Name())
		}
	case <-time.After(60 * time.Second):
		r.stop()
		return nil, fmt.Errorf("replica %s did not start", name)
	}
	return r, nil
}

// stop closes the replica's input, which stops it cleanly (its lease is revoked).
func (r *replica) stop() {
	_ = r.stdin.Close()
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func freePort(addr string) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", addr+":0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, strconv.Itoa(port)))
		l.Close()
		if err == nil {
			pc.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free on %s", addr)
}
