package talosnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// rules is machined's authorization table for the methods the lab serves;
// anything else needs os:admin (machined's fallback).
var rules = map[string]role.Set{
	"/machine.MachineService/ApplyConfiguration": role.MakeSet(role.Admin),
	"/machine.MachineService/Bootstrap":          role.MakeSet(role.Admin),
	"/machine.MachineService/Dmesg":              role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/EtcdRecover":        role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdSnapshot":       role.MakeSet(role.Admin, role.Operator, role.EtcdBackup),
	"/machine.MachineService/Hostname":           role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Kubeconfig":         role.MakeSet(role.Admin),
	"/machine.MachineService/Read":               role.MakeSet(role.Admin),
	"/machine.MachineService/Reboot":             role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/ServiceList":        role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Upgrade":            role.MakeSet(role.Admin),
	"/machine.MachineService/Version":            role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/Get":                   role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/List":                  role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/Watch":                 role.MakeSet(role.Admin, role.Operator, role.Reader),
}

// route is how a call reached the node: directly, via "node" (one-to-one
// proxying) or via "nodes" (one-to-many: errors travel in response metadata).
type route struct {
	target string // node name the client used; "" when it named none
	many   bool
}

func methodName(fullMethod string) string {
	return fullMethod[strings.LastIndex(fullMethod, "/")+1:]
}

// preflight runs what happens before the call reaches machined: the node
// being down (reboot) and apid's routing by node metadata.
func (n *Node) preflight(ctx context.Context) (route, error) {
	n.mu.Lock()
	down := time.Now().Before(n.unavailable)
	addr := n.addr
	n.mu.Unlock()

	if down {
		return route{}, status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp %s: connect: connection refused\"", addr)
	}

	md, _ := metadata.FromIncomingContext(ctx)
	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]

	if okNode && len(node) != 1 {
		return route{}, status.Error(codes.InvalidArgument, "node metadata must be single-valued")
	}

	switch {
	case okNodes:
		if len(nodes) == 0 {
			return route{many: true}, nil
		}

		// one-to-many: each target is answered in its own message; the lab
		// has one node, so every target must name it.
		for _, t := range nodes {
			if err := n.checkTarget(t); err != nil {
				return route{target: t, many: true}, err
			}
		}

		return route{target: nodes[0], many: true}, nil
	case okNode:
		if err := n.checkTarget(node[0]); err != nil {
			return route{}, err
		}

		return route{target: node[0]}, nil
	default:
		return route{}, nil
	}
}

// checkTarget answers like apid when asked to forward to target.
func (n *Node) checkTarget(target string) error {
	if target == "" || strings.Contains(strings.Trim(target, "[]"), ":") && net.ParseIP(strings.Trim(target, "[]")) == nil {
		// apid refuses targets with a port (NewAPID: "invalid target")
		return status.Errorf(codes.Internal, "invalid target %q", target)
	}

	t := strings.Trim(target, "[]")

	n.mu.Lock()
	host, _, _ := net.SplitHostPort(n.addr) //nolint:errcheck
	n.mu.Unlock()

	for _, known := range []string{n.opts.Hostname, "localhost", "127.0.0.1", "::1", host} {
		if t == known {
			return nil
		}
	}

	return status.Errorf(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp %s: connect: no route to host\"", net.JoinHostPort(t, "50000"))
}

// hostname is the value of Metadata.hostname in responses.
func (n *Node) hostname(r route) string {
	if r.target != "" {
		return r.target
	}

	return n.opts.Hostname
}

// machined runs what happens inside the node before the handler: injected
// faults and role-based authorization.
func (n *Node) machined(ctx context.Context, fullMethod string) error {
	n.mu.Lock()
	f, ok := n.faults[methodName(fullMethod)]
	n.mu.Unlock()

	if ok {
		if f.hang {
			<-ctx.Done()

			return status.FromContextError(ctx.Err()).Err()
		}

		return f.err
	}

	roles := peerRoles(ctx)

	allowed, ok := rules[fullMethod]
	if !ok {
		allowed = role.MakeSet(role.Admin)
	}

	if !roles.IncludesAny(allowed) {
		return status.Error(codes.PermissionDenied, "not authorized")
	}

	return nil
}

func peerRoles(ctx context.Context) role.Set {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.MakeSet()
	}

	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return role.MakeSet()
	}

	roles, _ := role.Parse(info.State.PeerCertificates[0].Subject.Organization)

	return roles
}

func (n *Node) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r, err := n.preflight(ctx)
	if err != nil {
		if r.many {
			return errorResponse(info.FullMethod, r.target, err)
		}

		return nil, err
	}

	resp, err := func() (any, error) {
		if err := n.machined(ctx, info.FullMethod); err != nil {
			return nil, err
		}

		return handler(ctx, req)
	}()
	if err != nil {
		if r.many {
			return errorResponse(info.FullMethod, n.hostname(r), err)
		}

		return nil, err
	}

	if m, ok := resp.(proto.Message); ok {
		setHostname(m.ProtoReflect(), n.hostname(r))
	}

	return resp, nil
}

type nodeStream struct {
	grpc.ServerStream

	ctx  context.Context //nolint:containedctx
	host string
}

func (s *nodeStream) Context() context.Context { return s.ctx }

func (s *nodeStream) SendMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		setHostname(pm.ProtoReflect(), s.host)
	}

	return s.ServerStream.SendMsg(m)
}

func (n *Node) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	r, err := n.preflight(ss.Context())
	if err != nil {
		if r.many {
			return sendStreamError(ss, info.FullMethod, r.target, err)
		}

		return err
	}

	// streams end when the node reboots
	n.mu.Lock()
	bootCtx := n.bootCtx
	n.mu.Unlock()

	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()

	stop := context.AfterFunc(bootCtx, cancel)
	defer stop()

	host := n.hostname(r)
	wrapped := &nodeStream{ServerStream: ss, ctx: ctx, host: host}

	err = n.machined(ctx, info.FullMethod)
	if err == nil {
		err = handler(srv, wrapped)
	}

	if err != nil && bootCtx.Err() != nil && ss.Context().Err() == nil {
		err = status.Error(codes.Unavailable, "error reading from server: EOF")
	}

	if err != nil && r.many {
		return sendStreamError(ss, info.FullMethod, host, err)
	}

	return err
}

// outputType is the response message type of a machine API method.
func outputType(fullMethod string) (protoreflect.MessageType, error) {
	parts := strings.Split(strings.TrimPrefix(fullMethod, "/"), "/")
	if len(parts) != 2 {
		return nil, fmt.Errorf("bad method %q", fullMethod)
	}

	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(parts[0]))
	if err != nil {
		return nil, err
	}

	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", parts[0])
	}

	md := sd.Methods().ByName(protoreflect.Name(parts[1]))
	if md == nil {
		return nil, fmt.Errorf("unknown method %q", fullMethod)
	}

	return protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
}

// errorMetadata encodes an error the way apid's BuildError does.
func errorMetadata(host string, err error) *common.Metadata {
	return &common.Metadata{ //nolint:staticcheck
		Hostname: host,
		Error:    err.Error(),
		Status:   status.Convert(err).Proto(),
	}
}

// errorResponse is apid's one-to-many unary error: a successful call whose
// single message carries the error in its metadata.
func errorResponse(fullMethod, host string, callErr error) (any, error) {
	mt, err := outputType(fullMethod)
	if err != nil {
		return nil, callErr
	}

	b, err := proto.Marshal(&common.EmptyResponse{Messages: []*common.Empty{{Metadata: errorMetadata(host, callErr)}}})
	if err != nil {
		return nil, callErr
	}

	resp := mt.New().Interface()
	if err = proto.Unmarshal(b, resp); err != nil {
		return nil, callErr
	}

	return resp, nil
}

// sendStreamError is apid's one-to-many streaming error: one message with the
// error in its metadata, then a clean end of stream.
func sendStreamError(ss grpc.ServerStream, fullMethod, host string, callErr error) error {
	mt, err := outputType(fullMethod)
	if err != nil {
		return callErr
	}

	b, err := proto.Marshal(&common.Empty{Metadata: errorMetadata(host, callErr)})
	if err != nil {
		return callErr
	}

	msg := mt.New().Interface()
	if err = proto.Unmarshal(b, msg); err != nil {
		return callErr
	}

	if err = ss.SendMsg(msg); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}

	return nil
}

// setHostname fills Metadata.hostname of a response (every element of its
// "messages") or of a streamed message, unless already set.
func setHostname(m protoreflect.Message, host string) {
	fields := m.Descriptor().Fields()

	if fd := fields.ByName("messages"); fd != nil && fd.IsList() && fd.Message() != nil {
		list := m.Mutable(fd).List()
		for i := range list.Len() {
			setHostname(list.Get(i).Message(), host)
		}

		return
	}

	fd := fields.ByName("metadata")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != "common.Metadata" {
		return
	}

	md := m.Mutable(fd).Message()
	hfd := md.Descriptor().Fields().ByName("hostname")

	if md.Get(hfd).String() == "" {
		md.Set(hfd, protoreflect.ValueOfString(host))
	}
}
