"""The node agent's decisions, pure where they can be (docs/node-agent.md): the engine mapping (`engine`), node
capacity (`capacity`), usage counters (`metrics`), the sim runtime's load models (`load`) and inventory
classification (`inventory`). The service `services/node-agent` is a thin shell over them."""
