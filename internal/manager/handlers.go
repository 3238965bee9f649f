package manager

import (
	"fmt"

	"github.com/atoll-fs/atoll/internal/cluster"
	"github.com/atoll-fs/atoll/internal/wire"
)

func (m *Manager) handleMove(req *wire.Request) (wire.Response, error) {
	c := &cluster.Command{}
	switch req.Op {
	case cluster.OpMoveEntries:
		var r cluster.MoveEntriesReq
		if err := cluster.Unmarshal(req.Msg, &r); err != nil {
			return wire.Response{}, fmt.Errorf("cluster: %s: %w", cluster.Schema.Name(req.Op), err)
		}
		if len(r.Moves) > cluster.MaxMoves {
			return wire.Response{}, fmt.Errorf("cluster: %s: %w: %d moves", cluster.Schema.Name(req.Op), cluster.ErrBadRequest, len(r.Moves))
		}
		c.Type, c.Moves = cluster.CmdMoveEntries, r.Moves
	default:
		var r cluster.MoveIDReq
		if err := cluster.Unmarshal(req.Msg, &r); err != nil {
			return wire.Response{}, fmt.Errorf("cluster: %s: %w", cluster.Schema.Name(req.Op), err)
		}
		c.Type, c.MoveID = cluster.CmdFinishMove, r.ID
		if req.Op == cluster.OpCancelMove {
			c.Type = cluster.CmdCancelMove
		}
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	res, err := m.apply(c)
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: %s: %w", cluster.Schema.Name(req.Op), err)
	}
	m.log.Info("manager: "+cluster.Schema.Name(req.Op), "moves", len(c.Moves), "id", c.MoveID, "epoch", res.Epoch)
	if res.Changed {
		m.noteMoves(req.Op, len(c.Moves), len(m.currentMap().Moves))
	}
	return wire.Response{Msg: cluster.Marshal(&cluster.EpochResp{Epoch: res.Epoch})}, nil
}

func (m *Manager) handlePlacement(req *wire.Request) (wire.Response, error) {
	c := &cluster.Command{}
	switch req.Op {
	case cluster.OpIslandServer:
		var r cluster.IslandServerReq
		if err := cluster.Unmarshal(req.Msg, &r); err != nil {
			return wire.Response{}, fmt.Errorf("cluster: %s: %w", cluster.Schema.Name(req.Op), err)
		}
		c.Type, c.Servers, c.Sets = cluster.CmdIslandServer, r.Servers, r.Seed
	default:
		var r cluster.SetReplicasReq
		if err := cluster.Unmarshal(req.Msg, &r); err != nil {
			return wire.Response{}, fmt.Errorf("cluster: %s: %w", cluster.Schema.Name(req.Op), err)
		}
		c.Type, c.Sets, c.Out = cluster.CmdSetReplicas, r.Sets, r.Out
	}
	if len(c.Servers) > cluster.MaxServers || len(c.Sets) > cluster.MaxReplicaSets || len(c.Out) > cluster.MaxServers {
		return wire.Response{}, fmt.Errorf("cluster: %s: %w: too many servers or sets", cluster.Schema.Name(req.Op), cluster.ErrBadRequest)
	}
	if err := m.leaderCheck(); err != nil {
		return wire.Response{}, err
	}
	res, err := m.apply(c)
	if err != nil {
		return wire.Response{}, fmt.Errorf("cluster: %s: %w", cluster.Schema.Name(req.Op), err)
	}
	if res.Changed {
		m.log.Info("manager: "+cluster.Schema.Name(req.Op), "servers", len(c.Servers), "sets", len(c.Sets), "out", c.Out, "epoch", res.Epoch)
		if req.Op == cluster.OpSetReplicas {
			var islands []uint32
			for _, set := range c.Sets {
				islands = append(islands, set.Island)
			}
			m.noteReplicaMoves(islands)
		}
	}
	return wire.Response{Msg: cluster.Marshal(&cluster.EpochResp{Epoch: res.Epoch})}, nil
}
