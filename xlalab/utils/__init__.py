"""torch_xla's ``torch_xla.utils`` helpers over xlalab: :mod:`.utils` (environment, temporary
folders, synthetic data), :mod:`.serialization` (``xser.save``/``load``) and :mod:`.closures`
(the step closures of ``xm.add_step_closure``)."""
