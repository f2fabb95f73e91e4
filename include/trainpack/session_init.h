// SessionInit: how a trainer's state is initialised before training (tensorpack's
// `tfutils/sessinit.py`). The trainer calls setup_graph(trainer) and then run_init(trainer)
// in `Trainer::initialize`, after the callbacks' setup_graph and before before_train.
//
// This file holds the interface and JustCurrentSession (keep the state as constructed). The
// restoring initialisers (SaverRestore, DictRestore, ChainInit) build on it.
//
// Differences from tensorpack: there is no session; `run_init` receives the trainer, whose Graph
// variables and modules it restores. The variable initialisers that TF runs first are the
// modules' constructors here.
#pragma once

#include <memory>
#include <string>

namespace trainpack {

class Trainer;

class SessionInit {
 public:
  virtual ~SessionInit() = default;
  // Resolve what the initialiser needs from the trainer's graph (before it is finalized).
  virtual void setup_graph(Trainer& /*trainer*/) {}
  // Apply the initialisation (e.g. load a checkpoint). Runs on the chief only.
  virtual void run_init(Trainer& trainer) = 0;
  // True for the no-op initialiser (a non-chief worker warns when it ignores any other).
  virtual bool is_noop() const { return false; }
  virtual std::string name() const;
};

// Does nothing: the model keeps the values it was constructed with.
class JustCurrentSession : public SessionInit {
 public:
  void run_init(Trainer& /*trainer*/) override {}
  bool is_noop() const override { return true; }
};

}  // namespace trainpack
